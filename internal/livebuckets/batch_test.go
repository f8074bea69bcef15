package livebuckets

import (
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestZeroDeltaSkipsVnode: a delta of no rows and no bytes (a row
// rewritten in its size) in a vnode the batch has not copied leaves the
// vnode where it is, uncopied and unlogged, unless it moves an anchor or
// changes a flag: those it applies, as it applies any delta.
func TestZeroDeltaSkipsVnode(t *testing.T) {
	const table = 3
	pk := func(i int) []byte { return keys.AppendUint64(nil, uint64(i)) }
	s := NewState()
	s.AddTable(table, 4)
	commit := func(epoch uint64, ds ...Delta) (copied int, logged bool) {
		b := s.Begin()
		for _, d := range ds {
			d.Table = table
			require.NoError(t, b.Apply(d))
		}
		copied = len(b.vnodes)
		b.Normalize()
		for _, e := range b.MetaEntries(epoch) {
			logged = logged || string(e.Key) == string(logKey(epoch))
		}
		b.Publish()
		return copied, logged
	}
	var load []Delta
	for i := 1; i <= 300; i++ {
		load = append(load, Delta{Vnode: 1, PK: pk(i), Counts: Counts{1, 10}, Live: true})
	}
	copied, _ := commit(1, load...)
	require.Equal(t, 1, copied)
	before := s.Current().tables[table].vnodes[1]
	require.True(t, before.minLive)
	require.True(t, before.maxLive)

	// Rewrites of rows inside the vnode, of the anchors (live already), of
	// a bucket's lower bound (live already): nothing changes.
	rewrites := []Delta{{Vnode: 1, PK: pk(7), Live: true}, {Vnode: 1, PK: pk(150), Live: true},
		{Vnode: 1, PK: pk(1), Live: true}, {Vnode: 1, PK: pk(300), Live: true}}
	for i := 1; i < len(before.buckets); i++ {
		rewrites = append(rewrites, Delta{Vnode: 1, PK: before.buckets[i].lower(), Live: before.buckets[i].lowerLive})
	}
	tableBefore := s.Current().tables[table]
	copied, logged := commit(2, rewrites...)
	require.Zero(t, copied, "no vnode copied")
	require.False(t, logged, "no log row")
	require.Same(t, before, s.Current().tables[table].vnodes[1], "the vnode stays where it was")
	require.Same(t, tableBefore, s.Current().tables[table], "nor is its table copied")

	// A delta past the largest pk moves the anchor; one that says the
	// smallest pk is not live flips its flag: both apply.
	copied, logged = commit(3, Delta{Vnode: 1, PK: pk(301), Live: true})
	require.Equal(t, 1, copied)
	require.True(t, logged)
	require.Equal(t, pk(301), s.Current().tables[table].vnodes[1].maxPK)
	copied, _ = commit(4, Delta{Vnode: 1, PK: pk(1), Live: false})
	require.Equal(t, 1, copied)
	require.False(t, s.Current().tables[table].vnodes[1].minLive)

	// A bad vnode is refused on this path too.
	b := s.Begin()
	require.ErrorContains(t, b.Apply(Delta{Table: table, Vnode: 9, PK: pk(1), Live: true}), "vnode 9 of table 3 with 4 vnodes")
	require.ErrorContains(t, b.Apply(Delta{Table: 8, Vnode: 0, PK: pk(1), Live: true}), "unknown table 8")
}
