package backfill

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAheadRows: the rows a vnode read ahead serve a later cursor only from
// inside their range, and an upstream op whose pk falls in that range (above
// the read's start and at or below its last row, or anywhere above the start
// once the read reached the vnode's end) cuts the range below the op's pk.
func TestAheadRows(t *testing.T) {
	pk := func(b byte) []byte { return []byte{b} }
	read := func(r *aheadRows, from []byte, plan uint64, end bool, pks ...byte) {
		r.start(from, plan)
		for _, p := range pks {
			src := []RowOp{{Kind: Insert, PK: pk(p), Row: []byte{p, p}}}
			r.add(src[0])
			src[0].PK[0], src[0].Row[0] = 0, 0 // the rows are copies
		}
		r.end, r.valid = end, true
	}
	pks := func(ops []RowOp) (out []byte) {
		for _, op := range ops {
			require.Equal(t, []byte{op.PK[0], op.PK[0]}, op.Row)
			out = append(out, op.PK[0])
		}
		return out
	}

	var r aheadRows
	read(&r, pk(10), 1, false, 20, 30, 40)
	_, ok := r.after(nil)
	require.False(t, ok, "rows from pk 10 do not hold the vnode's first")
	_, ok = r.after(pk(9))
	require.False(t, ok, "a cursor below the read's start")
	rows, ok := r.after(pk(10))
	require.True(t, ok)
	require.Equal(t, []byte{20, 30, 40}, pks(rows))
	rows, ok = r.after(pk(25))
	require.True(t, ok)
	require.Equal(t, []byte{30, 40}, pks(rows))
	require.False(t, r.used)
	_, ok = r.after(pk(40))
	require.False(t, ok, "no row above the cursor, and not the vnode's end: read on")
	require.True(t, r.used)

	for _, p := range []byte{5, 10, 41, 200} {
		r.touch(pk(p))
		require.Len(t, r.rows, 3, "an op at pk %d, outside (10, 40]", p)
	}
	r.touch(pk(40))
	require.True(t, r.valid)
	require.Equal(t, []byte{20, 30}, pks(r.rows), "an op at the last row cuts it off")
	require.True(t, r.cut)
	r.touch(pk(21))
	require.Equal(t, []byte{20}, pks(r.rows), "an op between rows cuts the rows above it")
	rows, ok = r.after(pk(10))
	require.True(t, ok)
	require.Equal(t, []byte{20}, pks(rows))
	r.touch(pk(11))
	require.False(t, r.valid, "an op below every row leaves none")
	_, ok = r.after(pk(10))
	require.False(t, ok)

	// A read from the vnode's first row to its end: a cursor past its
	// last row finds the vnode exhausted, and an op above its last row
	// takes the end away, not the rows.
	r.grow(0) // takes the cut, as before every read
	read(&r, nil, 2, true, 20, 30)
	rows, ok = r.after(nil)
	require.True(t, ok)
	require.Equal(t, []byte{20, 30}, pks(rows))
	rows, ok = r.after(pk(30))
	require.True(t, ok)
	require.Empty(t, rows)
	r.touch(pk(250))
	require.True(t, r.valid)
	require.False(t, r.end, "an op above the last row of a read that reached the end")
	require.Equal(t, []byte{20, 30}, pks(r.rows))
	require.False(t, r.cut, "no row was cut off")
	_, ok = r.after(pk(30))
	require.False(t, ok, "read on for the op's row")

	// A read by a plan that took rows read before keeps their bytes, which
	// that plan's ops point to; the two slabs take turns, and a later plan
	// reuses them without allocating.
	read(&r, nil, 3, false, 1, 2)
	r.take(4)
	first := r.rows[0]
	read(&r, pk(2), 4, false, 3, 4)
	require.Equal(t, []byte{1}, first.PK)
	require.Equal(t, []byte{1, 1}, first.Row)
	r.take(5)
	second := r.rows[0]
	read(&r, pk(4), 5, false, 5)
	require.Equal(t, []byte{3}, second.PK, "plan 5 took plan 4's rows")
	require.Equal(t, []byte{5}, first.PK, "plan 5 reuses the slab of plan 3's read")
	// As in the vnode order: each plan takes the row left over and reads
	// on into the other slab.
	from, op := pk(4), RowOp{Kind: Insert, PK: pk(5), Row: make([]byte, 300)}
	plan := uint64(5)
	allocs := testing.AllocsPerRun(10, func() {
		plan++
		r.take(plan)
		r.start(from, plan)
		r.add(op)
	})
	require.Zero(t, allocs, "plans taking and reading a vnode in turn")

	// The factors: staggered first reads, halved after a cut, doubled on
	// full use up to maxAhead, kept otherwise.
	var fs []int
	for i := range maxAhead + 1 {
		var r aheadRows
		fs = append(fs, r.grow(i))
	}
	require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 1}, fs)
	r = aheadRows{factor: 3}
	require.Equal(t, 3, r.grow(0))
	r.used = true
	require.Equal(t, 6, r.grow(0))
	r.used = true
	require.Equal(t, maxAhead, r.grow(0))
	require.Equal(t, maxAhead, r.grow(0))
	r.used, r.cut = true, true
	require.Equal(t, maxAhead/2, r.grow(0), "rows cut, then the rest taken")
	r.cut = true
	require.Equal(t, maxAhead/4, r.grow(0))
}
