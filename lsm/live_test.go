package lsm

import (
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestSplitsReproducedAfterRestart: bucket splits made after a commit are
// persisted only with the next one; after a crash in between, Open must
// split again and reproduce the same buckets, so that estimates shown
// before the crash are shown again after it (the backfill's displayed
// figure must not go backwards).
func TestSplitsReproducedAfterRestart(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{Logger: QuietLogger{}})
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(TableDef{ID: 1, VnodeCount: 2, PK: keys.Schema{keys.Uint64}}))
	def, _ := s.table(1)
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for pk := uint64(0); pk < 3000; pk++ {
		k := keys.AppendUint64(nil, pk)
		require.NoError(t, w.Insert(1, def.VnodeOf(k), k, []byte("row")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	before := s.Live()
	require.Greater(t, len(before.Detail(1, 0).Buckets), 8, "the commit must have split buckets")
	cursor := keys.AppendUint64(nil, 1234)
	est := before.EstimateRows(1, 0, nil, cursor)
	crashForTest(s)

	s, err = Open(dir, &Options{Logger: QuietLogger{}})
	require.NoError(t, err)
	defer s.Close()
	after := s.Live()
	for v := uint16(0); v < 2; v++ {
		require.Equal(t, before.Detail(1, v), after.Detail(1, v), "vnode %d", v)
	}
	require.Equal(t, est, after.EstimateRows(1, 0, nil, cursor))
}
