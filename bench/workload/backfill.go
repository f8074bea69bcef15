package workload

import (
	"context"

	"github.com/lsmstats/lsmstats/backfill"
)

// Source adapts a Generator to a backfill job's upstream.
type Source struct{ G *Generator }

var _ backfill.Source = Source{}

// Next implements backfill.Source: updates become UpdateDelete/UpdateInsert
// pairs.
func (s Source) Next(context.Context) ([]backfill.RowOp, error) {
	ops := s.G.Next()
	out := make([]backfill.RowOp, 0, len(ops))
	for _, op := range ops {
		switch op.Kind {
		case Insert:
			out = append(out, backfill.RowOp{Kind: backfill.Insert, Vnode: op.Vnode, PK: op.PK, Row: op.NewRow})
		case Delete:
			out = append(out, backfill.RowOp{Kind: backfill.Delete, Vnode: op.Vnode, PK: op.PK, Row: op.OldRow})
		case Update:
			out = append(out,
				backfill.RowOp{Kind: backfill.UpdateDelete, Vnode: op.Vnode, PK: op.PK, Row: op.OldRow},
				backfill.RowOp{Kind: backfill.UpdateInsert, Vnode: op.Vnode, PK: op.PK, Row: op.NewRow})
		}
	}
	return out, nil
}

// Step implements backfill.Source.
func (s Source) Step() uint64 { return s.G.Step() }

// Resume implements backfill.Source: the generator rebuilds its model from
// the upstream table at the committed epoch (Generator.Resume), which holds
// exactly what steps 1..at.Step produced; nothing is replayed.
func (s Source) Resume(at backfill.Position) error {
	if at.Step == 0 {
		return nil
	}
	snap, err := at.Store.Pin(at.Epoch)
	if err != nil {
		return err
	}
	defer snap.Close()
	return s.G.Resume(at.Step, func(vnode uint16, f func(pk, row []byte) error) error {
		it, err := snap.NewIter(at.Upstream.ID, vnode, nil, nil)
		if err != nil {
			return err
		}
		for ok := it.First(); ok; ok = it.Next() {
			if err := f(it.PK(), it.Row()); err != nil {
				_ = it.Close()
				return err
			}
		}
		return it.Close()
	})
}

// Finished implements backfill.Source: the generator's steps after the
// backfill are empty anyway once its during phase is over.
func (s Source) Finished(uint64) {}

// BackfillStep implements backfill.Source.
func (s Source) BackfillStep() uint64 { return s.G.BackfillStep() }

// Oracle is the exact truth from the generator's model, which equals the
// upstream table at the committed epoch when every step is committed.
type Oracle struct{ G *Generator }

var _ backfill.Oracle = Oracle{}

// Rows implements backfill.Oracle. The model answers for the step the
// generator is at, which at a checkpoint is the committed epoch's.
func (o Oracle) Rows(_ uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	total, _ = o.G.Live(vnode)
	if cursor != nil {
		behind = o.G.RowsAtOrBelow(vnode, cursor)
	}
	return behind, total, nil
}
