package backfill_test

import (
	"context"
	"fmt"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// userTable is a table as a user defines it: pk (name bytes, id u64),
// distributed by name.
func userTable(id uint32) lsm.TableDef {
	return lsm.TableDef{ID: id, Name: "orders", VnodeCount: 16, PK: keys.Schema{keys.Bytes, keys.Uint64}, DistKeyColumns: 1}
}

// userSource is an upstream as a user writes one, knowing no stored row:
// step s inserts rows (name s%7, id s*1000+i), updates those of step s-1
// with even i and deletes those of step s-2 with i%3 == 0, both in the
// checked form, and updates its own first insert within the step. Each
// step is a function of s alone, so the source resumes at any step
// without replaying the steps before it.
type userSource struct {
	def     lsm.TableDef
	rows    int    // inserts per step
	load    uint64 // steps before the backfill
	last    uint64 // the last step with ops
	step    uint64
	resumed []uint64 // the steps Resume was called at
	done    uint64   // the step Finished was called at (0: not called)
}

func (s *userSource) pk(step uint64, i int) []byte {
	pk := keys.AppendBytes(nil, fmt.Appendf(nil, "name%d", step%7))
	return keys.AppendUint64(pk, step*1000+uint64(i))
}

func (s *userSource) op(kind backfill.OpKind, pk, row []byte) backfill.RowOp {
	return backfill.RowOp{Kind: kind, Vnode: s.def.VnodeOf(pk), PK: pk, Row: row}
}

func (s *userSource) Resume(at backfill.Position) error {
	s.step = at.Step
	s.resumed = append(s.resumed, at.Step)
	return nil
}

func (s *userSource) Next(context.Context) ([]backfill.RowOp, error) {
	s.step++
	k := s.step
	if k > s.last {
		return nil, nil
	}
	var ops []backfill.RowOp
	for i := range s.rows {
		ops = append(ops, s.op(backfill.Insert, s.pk(k, i), fmt.Appendf(nil, "v%d.%d", k, i)))
	}
	ops = append(ops, s.op(backfill.CheckedUpdate, s.pk(k, 0), fmt.Appendf(nil, "v%d.0 again", k)))
	for i := 0; k > 1 && i < s.rows; i += 2 {
		ops = append(ops, s.op(backfill.CheckedUpdate, s.pk(k-1, i), fmt.Appendf(nil, "v%d.%d updated at %d", k-1, i, k)))
	}
	for i := 0; k > 2 && i < s.rows; i += 3 {
		ops = append(ops, s.op(backfill.CheckedDelete, s.pk(k-2, i), nil))
	}
	return ops, nil
}

func (s *userSource) Step() uint64         { return s.step }
func (s *userSource) BackfillStep() uint64 { return s.load + 1 }
func (s *userSource) Finished(step uint64) { s.done = step }
