package genjob_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/stretchr/testify/require"
)

// TestPart runs a Part beside a reference generator of the same workload:
// each step's ops are the reference's on the part's vnodes, in order, also
// after the set changes (SetVnodes) and after Resume replayed a new
// generator to the step (from step 0, and from a generator past it). Its
// oracle answers the part's vnodes as the reference model does and refuses
// the others, naming the vnode.
func TestPart(t *testing.T) {
	p, err := workload.Preset("mixed", 20000, 32, 3)
	require.NoError(t, err)
	p.BatchRows, p.DuringSteps = 4000, 10
	newGen := func() *workload.Generator {
		g, err := workload.New(p)
		require.NoError(t, err)
		return g
	}
	ref := newGen()
	set := roaring.New()
	set.AddRange(4, 20)
	part := genjob.NewPart(newGen(), set)
	set.Add(30) // the part keeps a copy
	require.False(t, part.Vnodes().Contains(30))
	ctx := context.Background()
	// step checks the part's next step against the reference's.
	step := func() {
		want := ref.Next()
		got, err := part.Next(ctx)
		require.NoError(t, err)
		k := 0
		for _, op := range want {
			if !part.Vnodes().Contains(uint32(op.Vnode)) {
				continue
			}
			require.Less(t, k, len(got), "step %d", ref.Step())
			require.Equal(t, op.Vnode, got[k].Vnode, "step %d op %d", ref.Step(), k)
			require.Equal(t, op.PK, got[k].PK, "step %d op %d", ref.Step(), k)
			k++
			if op.Kind == workload.Update {
				k++ // an UpdateDelete and UpdateInsert pair
			}
		}
		require.Len(t, got, k, "step %d: the part's ops", ref.Step())
		require.Equal(t, ref.Step(), part.Step())
	}
	for range 3 {
		step()
	}
	other := roaring.New()
	other.AddRange(16, 32)
	part.SetVnodes(other)
	for range 3 {
		step()
	}

	// A new process: a new generator replays to the committed step.
	at := ref.Step()
	part = genjob.NewPart(newGen(), other)
	start := time.Now()
	require.NoError(t, part.Resume(backfill.Position{Step: at}))
	t.Logf("replay of %d steps (%d rows loaded): %s", at, p.Rows, time.Since(start).Round(time.Microsecond))
	require.Equal(t, at, part.Step())
	step()
	// A generator past the step resumed to: a new one replays.
	ahead := genjob.NewPart(newGen(), other)
	ahead.G.Replay(at + 3)
	require.NoError(t, ahead.Resume(backfill.Position{Step: at + 1}))
	require.Equal(t, at+1, ahead.Step())
	part = ahead
	step()

	o := part.Oracle()
	cursor := make([]byte, 0)
	ref.EachRow(20, func(pk, _ []byte) {
		if len(cursor) == 0 {
			cursor = append(cursor, pk...)
		}
	})
	b, n, err := o.Rows(0, 20, cursor)
	require.NoError(t, err)
	wb, wn, _ := genjob.Oracle{G: ref}.Rows(0, 20, cursor)
	require.Equal(t, [2]int64{wb, wn}, [2]int64{b, n})
	require.Positive(t, n)
	_, _, err = o.Rows(0, 3, nil)
	require.ErrorContains(t, err, fmt.Sprintf("asked about vnode %d, not one of them", 3))
}
