package lsm_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestStoreCollector: a store's operational counters reach Prometheus
// beside its statistics, in one registry, under the same options, and a
// scrape after Close neither fails nor panics.
func TestStoreCollector(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	def := lsm.TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for e := uint64(1); e <= 3; e++ {
		for i := range uint64(100) {
			pk := keys.AppendUint64(nil, 3*i+e) // each vnode's epochs overlap
			require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, []byte("row")))
		}
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
		// A flush per checkpoint, whose SSTs overlap the other
		// checkpoints' in every vnode: the compaction below merges them
		// (SSTs that overlap nothing would be moved).
		require.NoError(t, lsminternal.DB(s).Flush())
	}
	require.NoError(t, s.CompactRange(context.Background(), 1, 0, 4))

	opts := &stats.MetricsOptions{Namespace: "kv", ConstLabels: prometheus.Labels{"store": "a"}}
	reg := prometheus.NewPedanticRegistry()
	c := s.Collector(opts)
	reg.MustRegister(stats.NewMetrics(s.Stats, opts), c)
	want := `
# HELP kv_store_commits_total Checkpoints committed.
# TYPE kv_store_commits_total counter
kv_store_commits_total{store="a"} 3
# HELP kv_gc_compactions_total Manual compactions of vnode ranges (Store.CompactRange).
# TYPE kv_gc_compactions_total counter
kv_gc_compactions_total{store="a"} 1
# HELP kv_store_corruptions_total Corrupt blocks Pebble met; each read that met one returned an error naming the file.
# TYPE kv_store_corruptions_total counter
kv_store_corruptions_total{store="a"} 0
`
	require.NoError(t, promtest.GatherAndCompare(reg, strings.NewReader(want),
		"kv_store_commits_total", "kv_gc_compactions_total", "kv_store_corruptions_total"))
	n, err := promtest.GatherAndCount(reg)
	require.NoError(t, err)
	require.Greater(t, n, 19, "the store's and the statistics' metrics")
	// The compaction's delta: its inputs held table 1's 300 entries (a
	// delta is computed on a goroutine of the statistics, after the
	// compaction).
	require.Eventually(t, func() bool {
		return gathered(t, reg, "kv_compaction_entries_total", map[string]string{"table": "1", "side": "input"}) >= 300
	}, 10*time.Second, 10*time.Millisecond, "the compaction's input entries")

	// The same counters as a struct, and Pebble's metrics: the three
	// flushes and the compaction that merged their files.
	m := s.Metrics()
	require.Equal(t, int64(3), m.Commits)
	require.Equal(t, int64(1), m.GCCompactions)
	require.Zero(t, m.GCPasses)
	require.Zero(t, m.Corruptions)
	pm, err := s.PebbleMetrics()
	require.NoError(t, err)
	require.GreaterOrEqual(t, pm.Flush.Count, int64(3))
	require.Positive(t, pm.Compact.Count)

	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	require.Greater(t, promtest.CollectAndCount(c), 19, "a scrape after Close")
	require.Equal(t, int64(3), s.Metrics().Commits, "counters after Close")
	require.Zero(t, s.Metrics().L0Files, "no LSM after Close")
	_, err = s.PebbleMetrics()
	require.ErrorIs(t, err, lsm.ErrClosed)
}

// gathered gathers reg and returns the value of the counter named name
// with labels (0 when there is none).
func gathered(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// TestStoreBackground: Store.Background counts the bytes each checkpoint
// commits and the time Pebble's flushes and compactions run.
func TestStoreBackground(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	written, _ := s.Background()
	require.Zero(t, written, "nothing committed")
	def := lsm.TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	busyGrows := func(before time.Duration, what string) {
		t.Helper()
		require.Eventually(t, func() bool { _, busy := s.Background(); return busy > before }, 10*time.Second, time.Millisecond, what)
	}
	var last int64
	for e := uint64(1); e <= 3; e++ {
		for i := range uint64(1000) {
			pk := keys.AppendUint64(nil, 3*i+e)
			require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, make([]byte, 100)))
		}
		require.NoError(t, w.Seal(e))
		written, before := s.Background()
		require.Equal(t, last, written, "a sealed epoch is not written yet")
		require.NoError(t, s.Commit(e))
		written, _ = s.Background()
		// 1,000 rows of 100 bytes and a 9-byte pk each, and their
		// buffer's overhead (BufferedBytes' measure).
		require.GreaterOrEqual(t, written-last, int64(1000*109), "epoch %d", e)
		require.Less(t, written-last, int64(1000*400), "epoch %d", e)
		last = written
		require.NoError(t, lsminternal.DB(s).Flush())
		busyGrows(before, fmt.Sprintf("the flush of epoch %d", e))
	}
	_, before := s.Background()
	require.NoError(t, s.CompactRange(context.Background(), 1, 0, 4))
	busyGrows(before, "the compaction")
	written, _ = s.Background()
	require.Equal(t, last, written, "flushes and compactions write nothing of the store's")
	// Idle once the compaction's end is in: the clock stands.
	require.Eventually(t, func() bool {
		_, b1 := s.Background()
		time.Sleep(5 * time.Millisecond)
		_, b2 := s.Background()
		return b1 == b2
	}, 10*time.Second, time.Millisecond, "idle")
}
