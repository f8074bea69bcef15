package livebuckets

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRelayout compares relayout with the layout change done the plain way
// (take the removed buckets out, put the inserted in, check every bound)
// on random layouts, valid and not, and checks that it never panics on
// indices a damaged log row may hold.
func TestRelayout(t *testing.T) {
	rng := seededRand(t)
	bound := func(i int) []byte { return fmt.Appendf(nil, "k%06d", i) }
	// plain is the reference: O(buckets) bound compares.
	plain := func(bs []bucket, removed []int, inserted []insertedBound) ([]bucket, bool) {
		for r, i := range removed {
			if i <= 0 || i >= len(bs) || r > 0 && i <= removed[r-1] {
				return nil, false
			}
		}
		var out []bucket
		for i, b := range bs {
			if !slices.Contains(removed, i) {
				out = append(out, b)
			}
		}
		for x, in := range inserted {
			if in.at <= 0 || in.at > len(out) || x > 0 && in.at <= inserted[x-1].at {
				return nil, false
			}
			var nb bucket
			nb.setLower(in.lower)
			out = slices.Insert(out, in.at, nb)
		}
		for j := 2; j < len(out); j++ {
			if bytes.Compare(out[j-1].lower(), out[j].lower()) >= 0 {
				return nil, false
			}
		}
		return out, true
	}
	valid := 0
	for range 20000 {
		n := 1 + rng.IntN(12)
		bs := make([]bucket, n)
		for i := 1; i < n; i++ {
			bs[i].setLower(bound(10 * i))
			bs[i].Rows = int64(i)
		}
		var removed []int
		for i := range n + 1 { // n: one past the buckets, sometimes
			if rng.IntN(4) == 0 {
				removed = append(removed, i)
			}
		}
		var inserted []insertedBound
		at := 0
		for range rng.IntN(4) {
			at += rng.IntN(3) // 0: an index that does not increase, sometimes
			// Bounds mostly between the kept ones, sometimes equal to one.
			inserted = append(inserted, insertedBound{at, bound(10*at - 5 + 5*rng.IntN(2))})
		}
		want, ok := plain(bs, removed, inserted)
		got, err := relayout(bs, removed, inserted)
		if !ok {
			require.Error(t, err, "removed %v inserted %v of %d", removed, inserted, n)
			continue
		}
		valid++
		require.NoError(t, err, "removed %v inserted %v of %d", removed, inserted, n)
		require.Equal(t, len(want), len(got))
		for j := range want {
			require.Equal(t, want[j].lower(), got[j].lower(), "bucket %d", j)
			require.Equal(t, want[j].Rows, got[j].Rows, "bucket %d", j)
		}
	}
	require.Greater(t, valid, 1000, "too few valid layouts to compare")
}
