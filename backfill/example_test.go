package backfill_test

import (
	"context"
	"fmt"
	"os"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// orders is a user's stream of changes to its table: step k inserts 50
// orders of customer k%5 and updates and deletes some of step k-1's,
// without knowing their stored rows (the checked forms). A step depends on
// k alone, so the stream resumes at any step.
type orders struct {
	def  lsm.TableDef
	step uint64
}

func orderPK(customer uint64, id uint64) []byte {
	return keys.AppendUint64(keys.AppendBytes(nil, fmt.Appendf(nil, "customer%d", customer)), id)
}

func (o *orders) Resume(at backfill.Position) error { o.step = at.Step; return nil }
func (o *orders) Step() uint64                      { return o.step }
func (o *orders) BackfillStep() uint64              { return 1 } // the table is loaded already
func (o *orders) Finished(uint64)                   {}
func (o *orders) Next(context.Context) ([]backfill.RowOp, error) {
	o.step++
	var ops []backfill.RowOp
	add := func(kind backfill.OpKind, pk []byte, row string) {
		ops = append(ops, backfill.RowOp{Kind: kind, Vnode: o.def.VnodeOf(pk), PK: pk, Row: []byte(row)})
	}
	for i := range uint64(50) {
		k := o.step
		add(backfill.Insert, orderPK(k%5, 1e6*k+i), "new")
		if k > 1 && i%5 == 0 {
			add(backfill.CheckedUpdate, orderPK((k-1)%5, 1e6*(k-1)+i), "paid")
		} else if k > 1 && i%5 == 1 {
			add(backfill.CheckedDelete, orderPK((k-1)%5, 1e6*(k-1)+i), "")
		}
	}
	return ops, nil
}

// Example backfills an MV from a user's table with a composite pk (bytes,
// u64), loaded by the user's writer, while the user keeps writing; it
// reads the progress at each checkpoint and restarts the job in the middle.
func Example() {
	dir, _ := os.MkdirTemp("", "backfill-example")
	defer os.RemoveAll(dir)
	s, _ := lsm.Open(dir, nil)
	defer s.Close()
	def := lsm.TableDef{ID: 1, Name: "orders", VnodeCount: 8, PK: keys.Schema{keys.Bytes, keys.Uint64}, DistKeyColumns: 1}
	_ = s.CreateTable(def)
	w, _ := s.NewWriter(1, nil, nil) // the user's own writer loads the table
	epoch := s.EpochFloor() + 1
	for i := range uint64(3000) {
		_ = w.Insert(epoch, def.VnodeOf(orderPK(i%7, i)), orderPK(i%7, i), []byte("old"))
	}
	_ = w.Seal(epoch)
	_ = s.Commit(epoch)
	_ = w.Close()

	var display backfilltest.Display // checks the display rules across the restart
	open := func() *backfill.Job {
		j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Upstream: def, Name: "orders_mv", // table ids from the catalog
			Actors: 2, BarrierRows: 200, Source: &orders{def: def},
			OnCheckpoint: func(r backfill.Record) { _ = display.Add(r) }}) // r.Displayed().Shown: "42.10% [41.95–42.30] (1263/3000)"
		if err != nil {
			panic(err)
		}
		return j
	}
	j := open()
	for range 4 { // the writes go on while the backfill runs: one step of the stream per epoch
		_, _, _ = j.Step(context.Background())
	}
	_ = j.Close() // a restart in the middle: the job reopens from its persisted state
	j = open()
	fmt.Println("figure before the first new barrier:", j.Initial() != nil, display.Add(*j.Initial()))
	_, _ = j.Run(context.Background())
	p, _ := j.Progress()
	fmt.Println(p.Displayed().Shown, display.Done(), j.Compare())
	_ = j.Close()
	// Output:
	// figure before the first new barrier: true <nil>
	// 100.00% (3410/3410) <nil> <nil>
}
