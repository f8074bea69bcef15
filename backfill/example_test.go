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

// Resume and Next are all a backfill.Source needs. Without a
// BackfillStep (backfill.Loader) the backfill starts at the first step:
// the table is loaded already.
func (o *orders) Resume(at backfill.Position) error { o.step = at.Step; return nil }
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

// loadOrders creates the user's table in s and loads 3,000 orders into it
// with the user's own writer.
func loadOrders(s *lsm.Store) lsm.TableDef {
	def := lsm.TableDef{ID: 1, Name: "orders", VnodeCount: 8, PK: keys.Schema{keys.Bytes, keys.Uint64}, DistKeyColumns: 1}
	_ = s.CreateTable(def)
	w, _ := s.NewWriter(1, nil, nil)
	epoch := s.EpochFloor() + 1
	for i := range uint64(3000) {
		_ = w.Insert(epoch, def.VnodeOf(orderPK(i%7, i)), orderPK(i%7, i), []byte("old"))
	}
	_ = w.Seal(epoch)
	_ = s.Commit(epoch)
	_ = w.Close()
	return def
}

// Example backfills an MV from a user's table with a composite pk (bytes,
// u64), loaded by the user's writer, while the user keeps writing; it
// reads the progress at each checkpoint and restarts the job in the middle.
func Example() {
	dir, _ := os.MkdirTemp("", "backfill-example")
	defer os.RemoveAll(dir)
	s, _ := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	defer s.Close()
	def := loadOrders(s)

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

// ExampleDriver runs a backfill with a Driver, which crashes the job
// (drops it and closes the store under it) when its figure reaches 50%
// and reopens it with twice the actors, as a new process would after a
// crash. OnCheckpoint sees every record: the reopened job's figure
// before its first new barrier too, marked Reopened, and the same as the
// figure the crash interrupted.
func ExampleDriver() {
	dir, _ := os.MkdirTemp("", "backfill-driver-example")
	defer os.RemoveAll(dir)
	opts := &lsm.Options{Logger: lsm.QuietLogger(nil)}
	s, _ := lsm.Open(dir, opts)
	def := loadOrders(s)

	crashed := false
	d := backfill.Driver{
		Open: func(o backfill.Opening) (backfill.JobConfig, error) {
			if o.Store == nil && o.Restart != nil { // the store closed with the crash
				var err error
				if s, err = lsm.Open(dir, opts); err != nil {
					return backfill.JobConfig{}, err
				}
			}
			return backfill.JobConfig{Store: s, Upstream: def, Name: "orders_mv",
				Actors: 2, BarrierRows: 200, Source: &orders{def: def}}, nil
		},
		Restart: func(r backfill.Record) (backfill.Restart, bool) {
			if crashed || r.Displayed().Raw < 50 {
				return backfill.Restart{}, false
			}
			crashed = true
			fmt.Println("crash at      ", r.Displayed().Shown)
			return backfill.Restart{Kind: backfill.RestartCrash, Actors: 4}, true
		},
		OnCheckpoint: func(r backfill.Record) {
			if r.Reopened {
				fmt.Println("reopened at   ", r.Displayed().Shown)
			}
		},
		OnEnd: func(j *backfill.Job) error {
			fmt.Println("MV equals its upstream:", j.Compare() == nil)
			return nil
		},
	}
	res, err := d.Run(context.Background())
	fmt.Println("finished at   ", res.Last.Displayed().Shown, err)
	_ = s.Close()
	// Output:
	// crash at       50.47% [50.47–50.48] (1600/3170)
	// reopened at    50.47% [50.47–50.48] (1600/3170)
	// MV equals its upstream: true
	// finished at    100.00% (3410/3410) <nil>
}
