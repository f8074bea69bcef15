package keys_test

import (
	"fmt"
	"log"

	"github.com/lsmstats/lsmstats/keys"
)

// Example encodes a composite pk, places it in its vnode and builds the
// versioned keys of two of its versions: the newer sorts first, as MVCC
// reads want, and decoding gives back every part.
func Example() {
	schema, err := keys.ParseSchema("bytes,u64")
	if err != nil {
		log.Fatal(err)
	}
	pk, err := schema.Encode(nil, "customer-7", uint64(42))
	if err != nil {
		log.Fatal(err)
	}
	vnode := keys.Vnode(pk, 256)
	older := keys.AppendVersioned(nil, 1, vnode, pk, keys.MakeVersion(5, 0), keys.KindPut)
	newer := keys.AppendVersioned(nil, 1, vnode, pk, keys.MakeVersion(9, 0), keys.KindDelete)
	fmt.Println("pk:", schema.Format(pk))
	fmt.Println("newer version first:", keys.Compare(newer, older) < 0)
	fmt.Println("same prefix:", keys.Split(newer) == keys.Split(older))

	k, err := keys.Decode(newer)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("table", k.Table, "vnode ok", k.Vnode == vnode, "epoch", k.Version.Epoch(), "delete", k.Kind == keys.KindDelete)
	// Output:
	// pk: ("customer-7", 42)
	// newer version first: true
	// same prefix: true
	// table 1 vnode ok true epoch 9 delete true
}
