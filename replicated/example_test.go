package replicated_test

import (
	"fmt"
	"log"
	"os"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/replicated"
	"github.com/lsmstats/lsmstats/stats"
)

// Example reads an upstream table through the replicated state table of an
// actor that owns all its vnodes: the rows committed in the store, plus two
// inserts and a delete the actor received at an epoch the store has not
// committed. Both the rows and the statistics of the view include them.
func Example() {
	dir, err := os.MkdirTemp("", "lsmstats-replicated-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := lsm.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	if err := s.CreateTable(lsm.TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}); err != nil {
		log.Fatal(err)
	}
	def, _ := s.Table(1)
	w, err := s.NewWriter(1, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	row := []byte("a row")
	epoch := s.EpochFloor() + 1
	for id := range uint64(10) {
		pk := keys.AppendUint64(nil, id)
		if err := w.Insert(epoch, def.VnodeOf(pk), pk, row); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Seal(epoch); err != nil {
		log.Fatal(err)
	}
	if err := s.Commit(epoch); err != nil {
		log.Fatal(err)
	}

	vnodes := roaring.New()
	vnodes.AddRange(0, uint64(def.VnodeCount))
	t, err := replicated.New(s, 1, vnodes)
	if err != nil {
		log.Fatal(err)
	}
	next := epoch + 1
	op := func(id uint64, live bool) replicated.Op {
		pk := keys.AppendUint64(nil, id)
		bytes := int64(len(pk) + len(row))
		if !live {
			return replicated.Op{Vnode: def.VnodeOf(pk), PK: pk, Delta: stats.LiveCounts{Rows: -1, Bytes: -bytes}}
		}
		return replicated.Op{Vnode: def.VnodeOf(pk), PK: pk, Live: true, Row: row, Delta: stats.LiveCounts{Rows: 1, Bytes: bytes}}
	}
	t.Apply(next, []replicated.Op{op(100, true), op(101, true), op(3, false)})

	snap, err := t.Snapshot(next)
	if err != nil {
		log.Fatal(err)
	}
	defer snap.Close()
	st := s.Stats()
	var rows, counted int64
	for v := range uint16(def.VnodeCount) {
		it, err := snap.Iter(v, nil)
		if err != nil {
			log.Fatal(err)
		}
		for it.Next() {
			rows++
		}
		if err := it.Close(); err != nil {
			log.Fatal(err)
		}
		counted += snap.Live(st, v).Rows
	}
	fmt.Println("committed:", st.Live.Table(1).Rows, "rows")
	fmt.Println("at the next epoch:", rows, "rows read,", counted, "by the statistics")
	// Output:
	// committed: 10 rows
	// at the next epoch: 11 rows read, 11 by the statistics
}
