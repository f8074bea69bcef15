package livebuckets

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
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

// TestLogCodec round-trips layouts of every size through the log value's
// codec (compressible ones come back compressed, noise plain), and checks
// that a value the codec refuses gets an error saying why, without
// allocating what a damaged frame header claims.
func TestLogCodec(t *testing.T) {
	rng := seededRand(t)
	for _, n := range []int{0, 1, 31, 32, 33, 100, 4096, 300_000} {
		for _, noise := range []bool{false, true} {
			layout := make([]byte, n)
			for i := range layout {
				if noise {
					layout[i] = byte(rng.Uint32())
				} else {
					layout[i] = byte(rng.IntN(4)) // a few small values, as the entries' gaps and rows
				}
			}
			v := encodeLogValue(layout)
			require.NotEmpty(t, v)
			if !noise && n >= 4096 {
				require.Equal(t, byte(logZstd), v[0], "%d bytes of small values", n)
				require.Less(t, len(v), n/2, "%d bytes of small values", n)
			}
			if noise || n < 32 {
				require.Equal(t, byte(logPlain), v[0], "%d bytes, noise %t", n, noise)
				require.Len(t, v, n+1)
			}
			got, err := decodeLogValue(v, 3)
			require.NoError(t, err)
			require.True(t, bytes.Equal(layout, got), "%d bytes, noise %t", n, noise)
			old, err := decodeLogValue(layout, 2) // format 2: the layout alone
			require.NoError(t, err)
			require.True(t, bytes.Equal(layout, old))
		}
	}
	enc, _ := logCodec()
	zeros := enc.EncodeAll(make([]byte, 1<<20), []byte{logZstd})
	// A frame of another writer: not single-segment, of content too short
	// for its header to hold the content size.
	multi, err := zstd.NewWriter(nil, zstd.WithSingleSegment(false))
	require.NoError(t, err)
	noSize := multi.EncodeAll(bytes.Repeat([]byte{1, 2}, 50), []byte{logZstd})
	for _, c := range []struct {
		value []byte
		err   string
	}{
		{nil, "empty log value: no codec"},
		{[]byte{7, 1, 2}, "unknown log codec 7"},
		{[]byte{logZstd}, "zstd frame header"},
		{[]byte{logZstd, 1, 2, 3, 4, 5, 6}, "zstd frame header"},
		{zeros, fmt.Sprintf("zstd frame of %d bytes decoding to 1048576 bytes", len(zeros)-1)},
		{append(bytes.Clone(zeros[:len(zeros)-3]), 0, 0, 0), "zstd frame"},
		{noSize, "content size given: false"},
	} {
		_, err := decodeLogValue(c.value, 3)
		require.ErrorContains(t, err, c.err, "%x", c.value)
	}
}

// FuzzLogValue feeds the log value's codec arbitrary bytes: decoding never
// panics and never returns more than the format allows (64 times the
// frame), and any layout comes back from its encoding unchanged.
func FuzzLogValue(f *testing.F) {
	enc, _ := logCodec()
	f.Add([]byte{logPlain, 0, 0, 0, 1, 1, 0, 0, 0, 0})
	f.Add(enc.EncodeAll(bytes.Repeat([]byte{0, 0, 0, 1, 2, 3}, 40), []byte{logZstd}))
	f.Add(enc.EncodeAll(make([]byte, 1<<16), []byte{logZstd}))
	f.Fuzz(func(t *testing.T, value []byte) {
		if layout, err := decodeLogValue(value, 3); err == nil && len(value) > 0 && value[0] == logZstd {
			require.LessOrEqual(t, len(layout), logMaxExpansion*(len(value)-1))
		}
		got, err := decodeLogValue(encodeLogValue(value), 3)
		require.NoError(t, err)
		require.True(t, bytes.Equal(value, got))
	})
}
