package compaction_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/lsmstats/lsmstats/compaction"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// Example updates every row of a table twice, so that each row has three
// versions, and runs one round of the policy: it finds the garbage in the
// statistics alone, collects the versions no reader needs and compacts
// them away, until the table holds one entry per live row.
func Example() {
	dir, err := os.MkdirTemp("", "lsmstats-compaction-example-")
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
	for round := range 3 {
		epoch := s.EpochFloor() + 1
		for id := range uint64(2000) {
			pk := keys.AppendUint64(nil, id)
			row := fmt.Appendf(nil, "row %d, version %d", id, round)
			if round == 0 {
				err = w.Insert(epoch, def.VnodeOf(pk), pk, row)
			} else {
				err = w.Update(epoch, def.VnodeOf(pk), pk, fmt.Appendf(nil, "row %d, version %d", id, round-1), row)
			}
			if err != nil {
				log.Fatal(err)
			}
		}
		if err := w.Seal(epoch); err != nil {
			log.Fatal(err)
		}
		if err := s.Commit(epoch); err != nil {
			log.Fatal(err)
		}
	}
	st := s.Stats()
	fmt.Println("before:", st.Physical.Table(1).TotalKeyCount, "entries,", st.Live.Table(1).Rows, "live rows")

	// Unpaced, and with a floor low enough for this small table (the
	// defaults are for tables of gigabytes).
	p, err := compaction.New(compaction.Config{Store: s, Rate: -1, Thresholds: compaction.Thresholds{MinGarbage: 100}})
	if err != nil {
		log.Fatal(err)
	}
	round, err := p.RunRound(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ranges collected:", len(round.GC) > 0, "compacted:", round.Compactions > 0)
	st = s.Stats()
	fmt.Println("after:", st.Physical.Table(1).TotalKeyCount, "entries,", st.Live.Table(1).Rows, "live rows")
	// Output:
	// before: 6000 entries, 2000 live rows
	// ranges collected: true compacted: true
	// after: 2000 entries, 2000 live rows
}
