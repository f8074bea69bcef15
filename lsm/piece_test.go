package lsm

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

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
		p := newPiece()
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

// TestPieceReuse: a piece made from a dead one takes its entries and its
// arena slabs, at most keepSlabs of them, before it allocates any, and the
// rows it copies are its own.
func TestPieceReuse(t *testing.T) {
	row := bytes.Repeat([]byte{1}, 1000)
	fill := func(p *piece, rows int) {
		for i := range rows {
			p.entries = append(p.entries, entry{prefix: p.addPrefix(9, 3, keys.AppendUint64(nil, uint64(i))), value: p.copyBytes(row)})
		}
	}
	p := newPiece()
	fill(&p, 300) // about 300 KB: five slabs
	require.Len(t, p.slabs, 5)
	old := slices.Clone(p.slabs)

	np := p.reuse(200)
	require.Empty(t, np.entries)
	require.Equal(t, cap(p.entries), cap(np.entries), "the entries are reused")
	require.Len(t, np.free, 5)
	row = bytes.Repeat([]byte{2}, 1000)
	fill(&np, 300)
	require.Empty(t, np.free, "every free slab taken before a new one")
	require.Len(t, np.slabs, 5)
	for _, s := range np.slabs {
		require.True(t, slices.ContainsFunc(old, func(o []byte) bool { return unsafe.SliceData(o) == unsafe.SliceData(s) }), "a slab of the dead piece")
	}
	for i, e := range np.entries {
		require.Equal(t, row, e.value, "row %d is the new piece's", i)
	}

	// Bounded: a piece of more than keepSlabs slabs leaves keepSlabs.
	big := newPiece()
	fill(&big, (keepSlabs+4)*arenaSlab/1000)
	require.Greater(t, len(big.slabs), keepSlabs)
	require.Len(t, big.reuse(0).free, keepSlabs)
}

// TestWriterReusesPiece: a writer's next epoch takes the buffers of the
// piece its last commit released, and the rows committed from them are
// the ones written.
func TestWriterReusesPiece(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, &WriterOptions{Unchecked: true})
	require.NoError(t, err)
	const rows = 500
	var last []*byte // the slabs of the last epoch's piece
	for epoch := uint64(1); epoch <= 3; epoch++ {
		for i := range rows {
			pk := keys.AppendUint64(nil, epoch*rows+uint64(i))
			require.NoError(t, w.Insert(epoch, def.VnodeOf(pk), pk, bytes.Repeat([]byte{byte(epoch)}, 300)))
		}
		w.mu.Lock()
		var slabs []*byte
		for _, sl := range w.open.slabs {
			slabs = append(slabs, unsafe.SliceData(sl))
		}
		w.mu.Unlock()
		require.NotEmpty(t, slabs)
		if epoch > 1 {
			for _, sl := range slabs {
				require.Contains(t, last, sl, "epoch %d: the piece reuses the last one's slabs", epoch)
			}
		}
		last = slabs
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	for epoch := uint64(1); epoch <= 3; epoch++ {
		for _, i := range []uint64{0, rows / 2, rows - 1} {
			pk := keys.AppendUint64(nil, epoch*rows+i)
			row, ok, err := w.Get(def.VnodeOf(pk), pk)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, bytes.Repeat([]byte{byte(epoch)}, 300), row, "pk %d of epoch %d", i, epoch)
		}
	}
	require.NoError(t, w.Close())
}
