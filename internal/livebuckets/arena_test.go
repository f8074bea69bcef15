package livebuckets

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

// TestArenaBounded: publishes that touch shifting sets of vnodes (each
// commit all vnodes from a random one on, which leaves every earlier arena
// held by a few vnodes) keep the arenas the current snapshot holds within
// twice the memory of its vnodes; each arena's held bytes are those of
// the current vnodes in it; each publish lays its vnodes out in vnode
// order; and the estimates are those of the vnodes' buckets whether read
// from the packed index or summed.
func TestArenaBounded(t *testing.T) {
	seed := testutil.Seed(t, "live-seed", *liveSeed)
	r := rand.New(rand.NewPCG(seed, 5))
	const table, vnodes = 3, 64
	s := NewState()
	s.AddTable(table, vnodes)
	next := 0
	for commit := range 300 {
		b := s.Begin()
		from := r.IntN(vnodes)
		if commit%50 == 0 {
			from = 0
		}
		for v := from; v < vnodes; v++ {
			for range 1 + r.IntN(20) {
				next++
				require.NoError(t, b.Apply(Delta{Table: table, Vnode: uint16(v), PK: livePK(next), Counts: Counts{1, 10}, Live: true}))
			}
		}
		b.Normalize()
		b.Publish()

		cur := s.Current().tables[table]
		held := map[*arena]int{}
		var live, prev uintptr
		var prevArena *arena
		for vn, v := range cur.vnodes {
			if v == nil {
				continue
			}
			require.NotNil(t, v.arena, "commit %d vnode %d: published outside an arena", commit, vn)
			held[v.arena] += v.footprint()
			live += uintptr(v.footprint())
			// Within an arena, vnodes lie in vnode order.
			addr := uintptr(unsafe.Pointer(v))
			if v.arena == prevArena {
				require.Greater(t, addr, prev, "commit %d vnode %d", commit, vn)
			}
			prev, prevArena = addr, v.arena
			var sum int64
			for i, bk := range v.buckets {
				before, rows, _ := v.rows(i)
				require.Equal(t, sum, before, "commit %d vnode %d bucket %d", commit, vn, i)
				require.Equal(t, bk.Rows, rows)
				sum += bk.Rows
			}
			require.Equal(t, v.total.Rows, sum)
		}
		var size int
		for a, h := range held {
			require.Equal(t, h, a.held, "commit %d: an arena's held bytes", commit)
			size += a.size
		}
		require.LessOrEqual(t, size, 2*int(live)+int(unsafe.Sizeof(liveVnode{}))*vnodes,
			"commit %d: %d arenas of %d bytes hold vnodes of %d", commit, len(held), size, live)
	}
}
