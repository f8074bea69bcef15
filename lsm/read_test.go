package lsm

import (
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestIterReset: an iterator Reset to another vnode (and bounds) returns
// what a new iterator over them returns, at the view it was created with;
// a vnode out of range, a bound that does not decode and a closed store
// are errors.
func TestIterReset(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = s.Close()
		}
	}()
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	d, _ := s.table(1)
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for pk := uint64(0); pk < 200; pk++ {
		k := keys.AppendUint64(nil, pk)
		require.NoError(t, w.Insert(1, d.VnodeOf(k), k, []byte{byte(pk)}))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))

	scan := func(it *Iter) []string {
		var out []string
		for ok := it.First(); ok; ok = it.Next() {
			out = append(out, string(it.PK())+"="+string(it.Row()))
		}
		require.NoError(t, it.Error())
		return out
	}
	fresh := func(vnode uint16, lo, hi []byte) []string {
		it, err := s.NewIter(1, vnode, lo, hi)
		require.NoError(t, err)
		defer it.Close()
		return scan(it)
	}
	shared, err := s.NewIter(1, 0, nil, nil)
	require.NoError(t, err)
	want0 := fresh(0, nil, nil)
	require.NotEmpty(t, want0)
	require.Equal(t, want0, scan(shared))

	// A later commit is not in the shared iterator's view.
	require.NoError(t, w.Update(2, d.VnodeOf(keys.AppendUint64(nil, 7)), keys.AppendUint64(nil, 7), []byte{7}, []byte("new")))
	require.NoError(t, w.Seal(2))
	before := map[uint16][]string{}
	for v := uint16(0); v < 4; v++ {
		before[v] = fresh(v, keys.AppendUint64(nil, 5), keys.AppendUint64(nil, 150))
	}
	require.NoError(t, s.Commit(2))
	v7 := d.VnodeOf(keys.AppendUint64(nil, 7))
	require.NotEqual(t, before[v7], fresh(v7, keys.AppendUint64(nil, 5), keys.AppendUint64(nil, 150)), "commit 2 changed pk 7")
	for v := uint16(0); v < 4; v++ {
		require.NoError(t, shared.Reset(v, keys.AppendUint64(nil, 5), keys.AppendUint64(nil, 150)))
		require.Equal(t, before[v], scan(shared), "vnode %d", v)
	}
	require.ErrorIs(t, shared.Reset(4, nil, nil), ErrInvalidVnode)
	require.ErrorIs(t, shared.Reset(0, []byte{1, 2}, nil), keys.ErrInvalidPK)
	require.NoError(t, shared.Close())
	require.NoError(t, w.Close())

	other, err := s.NewIter(1, 0, nil, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	closed = true
	require.ErrorIs(t, other.Reset(1, nil, nil), ErrClosed)
	_ = other.Close()
}
