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

// ExampleQuietLogger opens a store that keeps Pebble's informational lines
// (a line per flush, compaction and ingestion with Pebble's default
// logger) off standard error, writes a checkpoint, and reads the store's
// counters and Pebble's metrics.
func ExampleQuietLogger() {
	dir, err := os.MkdirTemp("", "lsmstats-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Errors still go to standard error; io.Discard would drop them too.
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(os.Stderr)})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	def := lsm.TableDef{ID: 1, Name: "events", VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	if err := s.CreateTable(def); err != nil {
		log.Fatal(err)
	}
	w, err := s.NewWriter(1, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	epoch := s.EpochFloor() + 1
	for id := range uint64(100) {
		pk := keys.AppendUint64(nil, id)
		if err := w.Insert(epoch, def.VnodeOf(pk), pk, []byte("event")); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Seal(epoch); err != nil {
		log.Fatal(err)
	}
	if err := s.Commit(epoch); err != nil {
		log.Fatal(err)
	}

	m := s.Metrics()
	fmt.Println("commits:", m.Commits, "spills:", m.Spills, "corrupt blocks:", m.Corruptions)
	pm, err := s.PebbleMetrics()
	if err != nil {
		log.Fatal(err)
	}
	// The checkpoint was small: one batch through Pebble's WAL and
	// memtable, not an ingestion (Options.CommitBatchBytes).
	fmt.Println("ingested into L0:", pm.Levels[0].TableBytesIngested > 0)
	// Output:
	// commits: 1 spills: 0 corrupt blocks: 0
	// ingested into L0: false
}
