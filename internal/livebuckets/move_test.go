package livebuckets

import (
	"bytes"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// moveState is a State with the model of its rows and what it persisted,
// as a store keeps them.
type moveState struct {
	t         *testing.T
	s         *State
	m         liveModel
	persisted map[string][]byte
	epoch     uint64
}

func newMoveState(t *testing.T, table uint32, vnodes int) *moveState {
	s := NewState()
	s.AddTable(table, vnodes)
	return &moveState{t: t, s: s, m: liveModel{}, persisted: map[string][]byte{}}
}

// persist writes a batch's entries at the next epoch, publishes it and
// splits what it asks, as a commit does (a commit's batch is normalized
// first, a move's is not). published, if not nil, is called between the
// publication and the splits.
func (ms *moveState) persist(b *Batch, normalize bool, published func()) {
	ms.epoch++
	if normalize {
		b.Normalize()
	}
	for _, e := range b.MetaEntries(ms.epoch) {
		if e.Delete {
			delete(ms.persisted, string(e.Key))
		} else {
			ms.persisted[string(e.Key)] = e.Value
		}
	}
	b.Publish()
	if published != nil {
		published()
	}
	for _, req := range b.Rescans() {
		require.NoError(ms.t, ms.s.ApplyRescans([]ScannedBucket{ms.m.split(req)}))
	}
}

// commit applies n random ops to vnodes [lo, hi) of table and persists
// them.
func (ms *moveState) commit(r *rand.Rand, table uint32, lo, hi, n int) {
	b := ms.s.Begin()
	for range n {
		v := uint16(lo + r.IntN(hi-lo))
		pk := livePK(r.IntN(3000))
		if ms.m[v] == nil {
			ms.m[v] = map[string]int64{}
		}
		old, live := ms.m[v][string(pk)]
		var d Counts
		switch {
		case !live:
			nb := int64(8 + r.IntN(50))
			ms.m[v][string(pk)] = nb
			d = Counts{1, nb}
		case r.IntN(3) == 0:
			delete(ms.m[v], string(pk))
			d = Counts{-1, -old}
		default:
			nb := int64(8 + r.IntN(50))
			ms.m[v][string(pk)] = nb
			d = Counts{0, nb - old}
		}
		_, live = ms.m[v][string(pk)]
		require.NoError(ms.t, b.Apply(Delta{Table: table, Vnode: v, PK: pk, Counts: d, Live: live}))
	}
	ms.persist(b, true, nil)
}

// check compares the state with its model, and its persisted rows with
// it (RowCheck: but the vnodes that rescans changed since the last commit,
// which the next commit persists).
func (ms *moveState) check(table uint32, vnodes int, what string) {
	l := ms.s.Current()
	for v := range uint16(vnodes) {
		require.Equal(ms.t, ms.m.count(v, nil, nil), l.Vnode(table, v), "%s: vnode %d", what, v)
	}
	ks := make([]string, 0, len(ms.persisted))
	for k := range ms.persisted {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	rows := make([][2][]byte, len(ks))
	for i, k := range ks {
		rows[i] = [2][]byte{[]byte(k), ms.persisted[k]}
	}
	corrupt, differ := ms.s.RowCheck().Check(rows)
	require.Empty(ms.t, corrupt, what)
	require.Empty(ms.t, differ, what)
}

// TestMoveVnodes moves the live statistics of three vnodes from one state
// to another that has rows in one of them: the destination holds the
// source's buckets exactly, the source holds empty vnodes, both persist
// what they hold (a reload gives it back, with the log rows written before
// and after the move), and commits go on on both.
func TestMoveVnodes(t *testing.T) {
	const table, vnodes = 7, 8
	r := rand.New(rand.NewPCG(1, 2))
	src, dst := newMoveState(t, table, vnodes), newMoveState(t, table, vnodes)
	for range 30 {
		src.commit(r, table, 0, vnodes, 300)
	}
	for range 10 {
		dst.commit(r, table, 2, 3, 100) // vnode 2: replaced by the move
		dst.commit(r, table, 6, 8, 100)
	}
	src.check(table, vnodes, "source before")
	dst.check(table, vnodes, "destination before")

	rows, err := src.s.Current().ExportVnodes(table, 2, 5)
	require.NoError(t, err)
	want := map[uint16]VnodeDetail{}
	var sum Counts
	for v := uint16(2); v < 5; v++ {
		want[v] = Detail(src.s.Current(), table, v)
		sum = sum.Add(src.m.count(v, nil, nil))
	}
	require.Equal(t, sum, rows.Counts)
	require.NotEmpty(t, rows.Rows)

	b, err := dst.s.Replace(table, 2, 5, rows)
	require.NoError(t, err)
	dst.persist(b, false, func() {
		for v := uint16(2); v < 5; v++ {
			require.Equal(t, want[v], Detail(dst.s.Current(), table, v), "vnode %d moved as it was", v)
		}
	})
	for v := uint16(2); v < 5; v++ {
		dst.m[v] = src.m[v]
	}
	dst.check(table, vnodes, "destination after the move")

	b, err = src.s.Replace(table, 2, 5, nil)
	require.NoError(t, err)
	src.persist(b, false, nil)
	for v := uint16(2); v < 5; v++ {
		delete(src.m, v)
	}
	src.check(table, vnodes, "source after the move")

	// Commits go on: the destination's moved vnodes are logged against
	// their folded rows, the source's others as before.
	for range 10 {
		dst.commit(r, table, 2, 5, 200)
		src.commit(r, table, 0, 2, 100)
	}
	dst.check(table, vnodes, "destination later")
	src.check(table, vnodes, "source later")
}

// TestMoveVnodesBadRows: rows that are not what an export makes are
// refused, naming what is wrong, and change nothing.
func TestMoveVnodesBadRows(t *testing.T) {
	const table, vnodes = 7, 8
	r := rand.New(rand.NewPCG(3, 4))
	src := newMoveState(t, table, vnodes)
	for range 5 {
		src.commit(r, table, 0, vnodes, 200)
	}
	rows, err := src.s.Current().ExportVnodes(table, 2, 5)
	require.NoError(t, err)
	dst := newMoveState(t, table, vnodes)
	before := dst.s.Current()
	edit := func(f func(r *VnodeRows)) *VnodeRows {
		c := *rows
		c.Rows = append([]MetaEntry(nil), rows.Rows...)
		f(&c)
		return &c
	}
	for _, c := range []struct {
		name string
		rows *VnodeRows
		says string
	}{
		{"other vnodes", edit(func(r *VnodeRows) { r.Lo = 1 }), "by the live statistics of vnodes [1, 5)"},
		{"other table", edit(func(r *VnodeRows) { r.Table = 8 }), "table 8"},
		{"counts", edit(func(r *VnodeRows) { r.Counts.Rows++ }), "the export says"},
		{"order", edit(func(r *VnodeRows) { r.Rows = append(r.Rows, r.Rows[len(r.Rows)-1]) }), "after"},
		{"no first row", edit(func(r *VnodeRows) { r.Rows = r.Rows[1:] }), "no first bucket row"},
		{"not a bucket", edit(func(r *VnodeRows) { r.Rows[0].Key = []byte("x") }), "not a bucket row"},
		{"value", edit(func(r *VnodeRows) { r.Rows[0].Value = r.Rows[0].Value[:1] }), "key"},
	} {
		_, err := dst.s.Replace(table, 2, 5, c.rows)
		require.ErrorContains(t, err, c.says, c.name)
		require.Same(t, before, dst.s.Current(), c.name)
	}
	_, err = dst.s.Replace(table, 4, 9, nil)
	require.ErrorContains(t, err, "vnodes [4, 9) of table 7 with 8 vnodes")
	_, err = dst.s.Replace(9, 0, 1, nil)
	require.ErrorContains(t, err, "unknown table 9")
	require.True(t, bytes.Equal(rows.Rows[0].Key, BucketKey(table, 2, nil, true)), "the first row is vnode 2's first bucket")
}
