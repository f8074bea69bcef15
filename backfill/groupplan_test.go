package backfill

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGroupPlan: an interleaved plan's rows, grouped, are the same rows,
// each vnode's in the order taken, the vnodes in the actor's order, and
// each row keeps its vnode's index; the buffers are reused.
func TestGroupPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	a := &Actor{vnodes: make([]VnodeState, 7)}
	for round := range 3 {
		p := &a.plan
		p.ops, p.idx = p.ops[:0], p.idx[:0]
		taken := make([]uint64, len(a.vnodes))
		for range 50 + r.IntN(100) {
			i := r.IntN(len(a.vnodes))
			taken[i]++
			pk := binary.BigEndian.AppendUint64(nil, taken[i])
			p.ops = append(p.ops, RowOp{Kind: Insert, Vnode: uint16(100 + i), PK: pk})
			p.idx = append(p.idx, i)
		}
		n := len(p.ops)
		a.groupPlan()
		require.Len(t, p.ops, n)
		require.Len(t, p.idx, n)
		next := make([]uint64, len(a.vnodes))
		last := -1
		for j, op := range p.ops {
			i := p.idx[j]
			require.GreaterOrEqual(t, i, last, "round %d row %d: vnodes out of order", round, j)
			last = i
			require.Equal(t, uint16(100+i), op.Vnode, "round %d row %d: the row lost its vnode's index", round, j)
			next[i]++
			require.Equal(t, next[i], binary.BigEndian.Uint64(op.PK), "round %d row %d: vnode %d's rows out of the order taken", round, j, i)
		}
		require.Equal(t, taken, next, "round %d: the rows taken", round)
	}
}
