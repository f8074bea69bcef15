package lsm

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestPieceOrder: a piece whose entries come in ascending prefix order
// keeps no index and finds them by their order; the first entry out of
// order builds the index, and every entry, before and after, is still
// found, absent prefixes are not, and sortedEntries is in key order.
func TestPieceOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(testutil.Seed(t, "seed", 0), 11))
	for _, outOfOrderAt := range []int{-1, 1, 50, 199} {
		p := newPiece(0)
		var added [][]byte
		has := map[uint64]bool{}
		for i := range 200 {
			id := uint64(2*i + 1)
			if i == outOfOrderAt {
				id = 2 * uint64(r.IntN(i)) // even, so never an earlier pk, and below the last
			}
			has[id] = true
			pk := keys.AppendUint64(nil, id)
			prefix := p.addPrefix(9, 3, pk)
			at, found := p.find(prefix)
			require.False(t, found, "out of order at %d: prefix %x before it was added", outOfOrderAt, prefix)
			require.Equal(t, i == outOfOrderAt, int(at) < i, "out of order at %d, entry %d: where it goes", outOfOrderAt, i)
			p.add(entry{prefix: prefix, put: true}, at)
			added = append(added, prefix)
			require.Equal(t, outOfOrderAt < 0 || i < outOfOrderAt, p.ordered, "out of order at %d, entry %d", outOfOrderAt, i)
		}
		for j, prefix := range added {
			i, ok := p.find(bytes.Clone(prefix))
			require.True(t, ok, "out of order at %d: entry %d", outOfOrderAt, j)
			require.Equal(t, int32(j), i)
		}
		for id := range uint64(402) {
			_, ok := p.find(keys.AppendPrefix(nil, 9, 3, keys.AppendUint64(nil, id)))
			require.Equal(t, has[id], ok, "out of order at %d: pk %d", outOfOrderAt, id)
		}
		sorted := p.sortedEntries()
		require.Len(t, sorted, len(added))
		require.True(t, slices.IsSortedFunc(sorted, func(a, b *entry) int { return bytes.Compare(a.prefix, b.prefix) }), "out of order at %d", outOfOrderAt)
	}
}

// TestSortEntries: entries sorted by their first 16 bytes as integers, then
// by their bytes, are in byte order, for prefixes shorter and longer than
// 16 bytes, prefixes of each other and ones that differ only past 16.
func TestSortEntries(t *testing.T) {
	r := rand.New(rand.NewPCG(testutil.Seed(t, "seed", 0), 12))
	for round := range 20 {
		var es []*entry
		seen := map[string]bool{}
		for range 500 {
			pk := make([]byte, r.IntN(24))
			for i := range pk {
				pk[i] = byte(r.IntN(3)) // few values: many ties and shared prefixes
			}
			prefix := keys.AppendPrefix(nil, 9, uint16(r.IntN(2)), pk)
			if cut := r.IntN(len(prefix) + 1); round%2 == 1 {
				prefix = prefix[:cut] // shorter than a table and vnode, too
			}
			if !seen[string(prefix)] {
				seen[string(prefix)] = true
				es = append(es, &entry{prefix: prefix})
			}
		}
		sortEntries(es)
		require.True(t, slices.IsSortedFunc(es, func(a, b *entry) int { return bytes.Compare(a.prefix, b.prefix) }), "round %d", round)
		require.Len(t, es, len(seen))
	}
}
