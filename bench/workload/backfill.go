package workload

import "github.com/lsmstats/lsmstats/backfill"

// Source adapts a Generator to a backfill job's upstream.
type Source struct{ G *Generator }

var _ backfill.Source = Source{}

// Next implements backfill.Source: updates become UpdateDelete/UpdateInsert
// pairs.
func (s Source) Next() []backfill.RowOp {
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
	return out
}

// Step implements backfill.Source.
func (s Source) Step() uint64 { return s.G.Step() }

// Replay implements backfill.Source.
func (s Source) Replay(k uint64) { s.G.Replay(k) }

// BackfillStep implements backfill.Source.
func (s Source) BackfillStep() uint64 { return s.G.BackfillStep() }

// Oracle is the exact truth from the generator's model, which equals the
// upstream table at the committed epoch when every step is committed.
type Oracle struct{ G *Generator }

var _ backfill.Oracle = Oracle{}

// Rows implements backfill.Oracle.
func (o Oracle) Rows(vnode uint16, cursor []byte) (behind, total int64, err error) {
	total, _ = o.G.Live(vnode)
	if cursor != nil {
		behind = o.G.RowsAtOrBelow(vnode, cursor)
	}
	return behind, total, nil
}
