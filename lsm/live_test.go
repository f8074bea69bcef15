package lsm

import (
	"testing"

	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
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
	s, err := Open(dir, &Options{Logger: QuietLogger(nil)})
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
	before := s.Stats().Live
	require.Greater(t, len(livebuckets.Detail(statsinternal.LiveOf(before), 1, 0).Buckets), 8, "the commit must have split buckets")
	cursor := keys.AppendUint64(nil, 1234)
	est := before.EstimateRows(1, 0, nil, cursor)
	crashForTest(s)

	s, err = Open(dir, &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	after := s.Stats().Live
	for v := uint16(0); v < 2; v++ {
		require.Equal(t, livebuckets.Detail(statsinternal.LiveOf(before), 1, v), livebuckets.Detail(statsinternal.LiveOf(after), 1, v), "vnode %d", v)
	}
	require.Equal(t, est, after.EstimateRows(1, 0, nil, cursor))
}

// TestRescansOfAdjacentBuckets: a commit that overfills many buckets of a
// vnode, adjacent ones and ones with gaps between them, rescans them with
// one iterator that continues from one bucket to the next where they touch
// and seeks over the gaps; the split buckets must count exactly what the
// table holds (Verify recounts them bucket by bucket).
func TestRescansOfAdjacentBuckets(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.CreateTable(TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	commit := func(epoch uint64, pks func(yield func(uint64))) {
		pks(func(pk uint64) {
			require.NoError(t, w.Insert(epoch, 0, keys.AppendUint64(nil, pk), []byte("row")))
		})
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	commit(1, func(yield func(uint64)) {
		for i := range uint64(1500) {
			yield(i * 1000)
		}
	})
	buckets := len(livebuckets.Detail(statsinternal.LiveOf(s.Stats().Live), 1, 0).Buckets)
	require.Greater(t, buckets, 50)
	scans := s.Metrics().BucketScans
	// Fill a run of adjacent buckets, and two lone ones further on.
	commit(2, func(yield func(uint64)) {
		for _, i := range []uint64{200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 700, 1100} {
			for j := range uint64(120) {
				yield(i*1000 + 1 + j)
			}
		}
	})
	require.Greater(t, s.Metrics().BucketScans-scans, int64(3), "the commit must have rescanned several buckets")
	require.Greater(t, len(livebuckets.Detail(statsinternal.LiveOf(s.Stats().Live), 1, 0).Buckets), buckets)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%v", rep.Differences)
	require.Equal(t, int64(1500+13*120), s.Stats().Live.Table(1).Rows)
}

// TestStatsBucketBudget: Options.StatsBucketBudget bounds a table's buckets
// whatever its rows: a table of 8 vnodes filled over several commits, each
// spread over all vnodes, keeps between the budget and 4·budget + vnodes
// buckets (tighter than the 8·budget + vnodes of any fill order: every
// vnode is merged at every commit here), its estimates hold the truth,
// Verify recounts every bucket exactly, and a store reopened with the same
// budget keeps the same buckets.
func TestStatsBucketBudget(t *testing.T) {
	const budget, vnodes = 16, 8
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(nil), StatsBucketBudget: budget}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(TableDef{ID: 1, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}))
	def, _ := s.table(1)
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	perVnode := map[uint16][]uint64{}
	for epoch := uint64(1); epoch <= 4; epoch++ {
		for i := range uint64(2000) {
			pk := (epoch-1)*2000 + i
			k := keys.AppendUint64(nil, pk*7919%100003)
			v := def.VnodeOf(k)
			perVnode[v] = append(perVnode[v], pk*7919%100003)
			require.NoError(t, w.Insert(epoch, v, k, []byte("row")))
		}
		require.NoError(t, w.Seal(epoch))
		require.NoError(t, s.Commit(epoch))
	}
	require.NoError(t, w.Close())
	live := s.Stats().Live
	buckets := 0
	for v := range uint16(vnodes) {
		buckets += len(livebuckets.Detail(statsinternal.LiveOf(live), 1, v).Buckets)
		cursor := keys.AppendUint64(nil, 50000)
		truth := int64(0)
		for _, pk := range perVnode[v] {
			if pk < 50000 {
				truth++
			}
		}
		est := live.EstimateRows(1, v, nil, cursor)
		require.LessOrEqual(t, est.Lower, truth, "vnode %d", v)
		require.GreaterOrEqual(t, est.Upper, truth, "vnode %d", v)
	}
	t.Logf("8,000 rows: %d buckets with a budget of %d", buckets, budget)
	require.GreaterOrEqual(t, buckets, budget)
	require.LessOrEqual(t, buckets, 4*budget+vnodes)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	require.NoError(t, s.Close())

	s, err = Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	for v := range uint16(vnodes) {
		require.Equal(t, livebuckets.Detail(statsinternal.LiveOf(live), 1, v), livebuckets.Detail(statsinternal.LiveOf(s.Stats().Live), 1, v), "vnode %d", v)
	}
}
