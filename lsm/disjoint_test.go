package lsm

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestDisjointCommitMatchesMerge writes one random history of checkpoints
// into two stores, one that writes a checkpoint of disjoint writers in two
// goroutines (writeDisjoint) and one that merges every checkpoint
// (writeData's heap), and requires the same Pebble contents of them:
// every row version, and every metadata row, the live statistics' buckets
// and log among them; and the same physical statistics, which before a
// flush are the checkpoints' batch summaries. The history has what a
// backfill's commit has (two writers on the two halves of a table's
// vnodes, a small writer of another table, checked updates and deletes, an
// unchecked writer) and what makes a checkpoint fall back to the merge:
// writers with two sealed epochs in one checkpoint. (Two writers cannot
// own one vnode: NewWriter refuses.)
func TestDisjointCommitMatchesMerge(t *testing.T) {
	seed := testSeed(t)
	defer func(n int) { disjointMinEntries = n }(disjointMinEntries)
	disjointMinEntries = 64 // most of the history's checkpoints
	before := disjointCommits.Load()
	disjoint := writeHistory(t, seed)
	used := disjointCommits.Load() - before
	require.GreaterOrEqual(t, used, int64(15), "checkpoints that took writeDisjoint, of 24")

	disjointMinEntries = math.MaxInt
	before = disjointCommits.Load()
	merged := writeHistory(t, seed)
	require.Zero(t, disjointCommits.Load()-before, "writeDisjoint ran with its minimum at MaxInt")

	require.Equal(t, len(merged), len(disjoint), "keys of the two stores (seed %d)", seed)
	for i := range merged {
		require.Equal(t, merged[i], disjoint[i], "key %d of %d (seed %d)", i, len(merged), seed)
	}
	t.Logf("seed %d: %d keys alike; %d checkpoints written disjoint", seed, len(merged), used)
}

// writeHistory writes the history of TestDisjointCommitMatchesMerge from
// seed into a new store and returns its physical statistics and every key
// and value of its Pebble.
func writeHistory(t *testing.T, seed uint64) []string {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	const vnodes = 16
	mv := TableDef{ID: 1, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}
	state := TableDef{ID: 2, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}, VnodeKeyed: true}
	other := TableDef{ID: 3, VnodeCount: vnodes, PK: keys.Schema{keys.Bytes, keys.Uint64}}
	for _, d := range []TableDef{mv, state, other} {
		require.NoError(t, s.CreateTable(d))
	}
	half := func(lo uint64) *roaring.Bitmap {
		b := roaring.New()
		b.AddRange(lo, lo+vnodes/2)
		return b
	}
	low, err := s.NewWriter(mv.ID, half(0), nil)
	require.NoError(t, err)
	high, err := s.NewWriter(mv.ID, half(vnodes/2), nil)
	require.NoError(t, err)
	sw, err := s.NewWriter(state.ID, nil, nil)
	require.NoError(t, err)
	ow, err := s.NewWriter(other.ID, nil, &WriterOptions{Unchecked: true})
	require.NoError(t, err)

	r := rand.New(rand.NewPCG(seed, 1))
	owner := func(vn uint16) *Writer {
		if vn < vnodes/2 {
			return low
		}
		return high
	}
	var pks [][]byte // the MV's rows so far
	write := func(epoch uint64) {
		for range 200 + r.IntN(400) {
			switch op := r.IntN(10); {
			case op < 7 || len(pks) == 0:
				pk := keys.AppendUint64(nil, r.Uint64())
				vn := mv.VnodeOf(pk)
				require.NoError(t, owner(vn).Insert(epoch, vn, pk, bytes.Repeat([]byte{byte(op)}, 1+r.IntN(200))))
				pks = append(pks, pk)
			case op < 9:
				pk := pks[r.IntN(len(pks))]
				vn := mv.VnodeOf(pk)
				w := owner(vn)
				old, ok, err := w.Get(vn, pk)
				require.NoError(t, err)
				if ok {
					require.NoError(t, w.Update(epoch, vn, pk, old, bytes.Repeat([]byte{9}, 1+r.IntN(300))))
				}
			default:
				i := r.IntN(len(pks))
				pk := pks[i]
				vn := mv.VnodeOf(pk)
				w := owner(vn)
				old, ok, err := w.Get(vn, pk)
				require.NoError(t, err)
				if ok {
					require.NoError(t, w.Delete(epoch, vn, pk, old))
				}
				pks = append(pks[:i], pks[i+1:]...)
			}
		}
		for range 2 {
			vn := uint16(r.IntN(vnodes))
			pk := keys.AppendUint64(nil, uint64(vn))
			row := []byte(fmt.Sprintf("epoch %d", epoch))
			old, ok, err := sw.Get(vn, pk)
			require.NoError(t, err)
			if ok {
				require.NoError(t, sw.Update(epoch, vn, pk, old, row))
			} else {
				require.NoError(t, sw.Insert(epoch, vn, pk, row))
			}
		}
		pk := append(keys.AppendBytes(nil, []byte("k")), keys.AppendUint64(nil, epoch)...)
		require.NoError(t, ow.Insert(epoch, other.VnodeOf(pk), pk, []byte("v")))
	}
	seal := func(epoch uint64) {
		for _, w := range []*Writer{low, high, sw, ow} {
			require.NoError(t, w.Seal(epoch))
		}
	}
	epoch := uint64(0)
	for step := range 24 {
		epoch++
		write(epoch)
		seal(epoch)
		if step%6 == 5 {
			// Two sealed epochs in one checkpoint: their prefixes may
			// repeat, so the checkpoint merges.
			epoch++
			write(epoch)
			seal(epoch)
		}
		require.NoError(t, s.Commit(epoch))
	}
	for _, w := range []*Writer{low, high, sw, ow} {
		require.NoError(t, w.Close())
	}

	// The physical statistics: nothing has been flushed, so they are the
	// checkpoints' batch summaries.
	var out []string
	phys := s.Stats().Physical
	for _, table := range phys.Tables() {
		out = append(out, fmt.Sprintf("table %d: %+v", table, phys.Table(table)))
		for _, vn := range phys.Vnodes(table) {
			out = append(out, fmt.Sprintf("table %d vnode %d: %+v", table, vn, phys.Vnode(table, vn)))
		}
	}

	it, err := s.db.NewIter(&pebble.IterOptions{})
	require.NoError(t, err)
	defer func() { require.NoError(t, it.Close()) }()
	for valid := it.First(); valid; valid = it.Next() {
		out = append(out, fmt.Sprintf("%x=%x", it.Key(), it.Value()))
	}
	require.NoError(t, it.Error())
	return out
}
