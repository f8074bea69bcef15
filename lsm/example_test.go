package lsm_test

import (
	"fmt"
	"log"
	"os"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// Example writes rows at an epoch, commits a checkpoint, reads them back
// and asks the statistics how many live rows lie below a pk — without
// reading the table.
func Example() {
	dir, err := os.MkdirTemp("", "lsmstats-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	s, err := lsm.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	orders := lsm.TableDef{ID: 1, Name: "orders", VnodeCount: 16, PK: keys.Schema{keys.Uint64}}
	if err := s.CreateTable(orders); err != nil {
		log.Fatal(err)
	}
	def, _ := s.Table(1)

	// One writer owns all vnodes of the table (nil vnode set).
	w, err := s.NewWriter(1, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	epoch := s.EpochFloor() + 1
	for id := uint64(0); id < 1000; id++ {
		pk := keys.AppendUint64(nil, id)
		if err := w.Insert(epoch, def.VnodeOf(pk), pk, []byte(fmt.Sprintf("order %d", id))); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Seal(epoch); err != nil {
		log.Fatal(err)
	}
	if err := s.Commit(epoch); err != nil {
		log.Fatal(err)
	}

	pk := keys.AppendUint64(nil, 42)
	row, ok, err := s.Get(1, def.VnodeOf(pk), pk)
	fmt.Println(string(row), ok, err)

	st := s.Stats()
	var live int64
	for v := uint16(0); v < 16; v++ {
		live += st.Vnode(1, v).Live.Rows
	}
	fmt.Println("live rows:", live, "physical entries:", st.Physical.Table(1).TotalKeyCount)
	// Output:
	// order 42 true <nil>
	// live rows: 1000 physical entries: 1000
}
