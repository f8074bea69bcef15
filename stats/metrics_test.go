package stats_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestMetrics exports the statistics of a real store and compares every
// metric with figures worked out by hand from the ops.
func TestMetrics(t *testing.T) {
	e := openStore(t, uncompacted())
	e.createTable(1, 4)
	e.createTable(2, 2)
	w1 := e.writer(1)
	w2, err := e.s.NewWriter(2, nil, &lsm.WriterOptions{Unchecked: true})
	require.NoError(t, err)
	e.writers[2] = w2
	def1, _ := e.s.Table(1)
	def2, _ := e.s.Table(2)
	row := func(s string, i int) []byte { return fmt.Appendf(nil, "%s-%02d", s, i) } // 6 bytes

	// Epoch 1: 10 rows in table 1, 3 in table 2 (unchecked).
	for i := 1; i <= 10; i++ {
		require.NoError(t, w1.Insert(1, def1.VnodeOf(pk64(uint64(i))), pk64(uint64(i)), row("row", i)))
	}
	for i := 1; i <= 3; i++ {
		require.NoError(t, w2.Insert(1, def2.VnodeOf(pk64(uint64(i))), pk64(uint64(i)), row("row", i)))
	}
	e.commit(1)
	// Epoch 2: table 1: 3 updates, 2 deletes.
	for i := 1; i <= 3; i++ {
		require.NoError(t, w1.Update(2, def1.VnodeOf(pk64(uint64(i))), pk64(uint64(i)), row("row", i), row("upd", i)))
	}
	for i := 4; i <= 5; i++ {
		require.NoError(t, w1.Delete(2, def1.VnodeOf(pk64(uint64(i))), pk64(uint64(i)), row("row", i)))
	}
	e.commit(2)

	// An SST ingested behind the store's back, written without the
	// collector: its statistics are rebuilt from its keys (table 99 is not
	// in the catalog, so it has physical statistics and no live ones).
	ingestWithoutCollector(t, e, [][]byte{
		keys.AppendVersioned(nil, 99, 0, pk64(1), keys.MakeVersion(1, 0), keys.KindPut),
		keys.AppendVersioned(nil, 99, 0, pk64(2), keys.MakeVersion(1, 0), keys.KindDelete),
	})
	e.waitStats()

	var calls atomic.Int64
	var published time.Time
	m := stats.NewMetrics(func() stats.Snapshot {
		calls.Add(1)
		s := e.s.Stats()
		published = statsinternal.LiveOf(s.Live).PublishedAt()
		return s
	}, &stats.MetricsOptions{
		ConstLabels: prometheus.Labels{"store": "test"},
		Now:         func() time.Time { return published.Add(90 * time.Second) },
	})

	st := e.s.Stats()
	// Estimated value bytes and bucket counts are read back; every other
	// figure is worked out from the ops:
	//   table 1: 10 inserts + 3 updates = 13 puts, 2 deletes, 15 entries of
	//   25-byte keys (6 header + 8 pk + 1 + 10 suffix); 8 live rows of
	//   8 + 6 bytes.
	//   table 2: 3 puts, 3 live rows of 14 bytes, unchecked.
	//   table 99: 1 put, 1 delete, no live statistics.
	//   SSTs (one table per SST): format version and two catalog entries
	//   (3); epoch 1's tables 1 and 2 and its metadata (3); epoch 2's table
	//   1 and its metadata (2); the SST without collector (rebuilt).
	want := fmt.Sprintf(`
# HELP lsmstats_stats_age_seconds Seconds since the live statistics were last published (by a commit, a bucket split, or the store's open).
# TYPE lsmstats_stats_age_seconds gauge
lsmstats_stats_age_seconds{store="test"} 90
# HELP lsmstats_stats_committed_epoch Committed epoch the statistics describe.
# TYPE lsmstats_stats_committed_epoch gauge
lsmstats_stats_committed_epoch{store="test"} 2
# HELP lsmstats_stats_live_ssts Live SSTs whose statistics are summed.
# TYPE lsmstats_stats_live_ssts gauge
lsmstats_stats_live_ssts{store="test"} %d
# HELP lsmstats_stats_physical_stale 1 if the last refresh of the physical statistics failed, so that they describe an earlier set of SSTs until a retry succeeds, else 0.
# TYPE lsmstats_stats_physical_stale gauge
lsmstats_stats_physical_stale{store="test"} 0
# HELP lsmstats_stats_rebuilt_payloads Live SSTs whose statistics payload was missing, corrupt or inconsistent and was rebuilt from their keys.
# TYPE lsmstats_stats_rebuilt_payloads gauge
lsmstats_stats_rebuilt_payloads{store="test"} 1
# HELP lsmstats_stats_virtual_ssts Live virtual SSTs, whose statistics were computed from their backing file's keys.
# TYPE lsmstats_stats_virtual_ssts gauge
lsmstats_stats_virtual_ssts{store="test"} 0
# HELP lsmstats_table_key_bytes User key bytes of the MVCC entries in the live SSTs (Hummock's total_key_size).
# TYPE lsmstats_table_key_bytes gauge
lsmstats_table_key_bytes{store="test",table="1"} 375
lsmstats_table_key_bytes{store="test",table="2"} 75
lsmstats_table_key_bytes{store="test",table="99"} 50
# HELP lsmstats_table_live_buckets Buckets of the live statistics (their memory; each range estimate is exact but for two buckets).
# TYPE lsmstats_table_live_buckets gauge
lsmstats_table_live_buckets{store="test",table="1"} %d
lsmstats_table_live_buckets{store="test",table="2"} %d
lsmstats_table_live_buckets{store="test",table="99"} 0
# HELP lsmstats_table_live_bytes Bytes of the live rows (pk and row) at the committed epoch.
# TYPE lsmstats_table_live_bytes gauge
lsmstats_table_live_bytes{store="test",table="1"} 112
lsmstats_table_live_bytes{store="test",table="2"} 42
lsmstats_table_live_bytes{store="test",table="99"} 0
# HELP lsmstats_table_live_contains_estimates 1 if the live counts were built from unchecked ops and may contain estimates, else 0.
# TYPE lsmstats_table_live_contains_estimates gauge
lsmstats_table_live_contains_estimates{store="test",table="1"} 0
lsmstats_table_live_contains_estimates{store="test",table="2"} 1
lsmstats_table_live_contains_estimates{store="test",table="99"} 0
# HELP lsmstats_table_live_rows Exact number of live rows at the committed epoch.
# TYPE lsmstats_table_live_rows gauge
lsmstats_table_live_rows{store="test",table="1"} 8
lsmstats_table_live_rows{store="test",table="2"} 3
lsmstats_table_live_rows{store="test",table="99"} 0
# HELP lsmstats_table_mvcc_deletes MVCC delete versions (tombstones of rows) in the live SSTs.
# TYPE lsmstats_table_mvcc_deletes gauge
lsmstats_table_mvcc_deletes{store="test",table="1"} 2
lsmstats_table_mvcc_deletes{store="test",table="2"} 0
lsmstats_table_mvcc_deletes{store="test",table="99"} 1
# HELP lsmstats_table_mvcc_puts MVCC put versions in the live SSTs.
# TYPE lsmstats_table_mvcc_puts gauge
lsmstats_table_mvcc_puts{store="test",table="1"} 13
lsmstats_table_mvcc_puts{store="test",table="2"} 3
lsmstats_table_mvcc_puts{store="test",table="99"} 1
# HELP lsmstats_table_pebble_tombstones Pebble point tombstones written by MVCC garbage collection, in the live SSTs.
# TYPE lsmstats_table_pebble_tombstones gauge
lsmstats_table_pebble_tombstones{store="test",table="1"} 0
lsmstats_table_pebble_tombstones{store="test",table="2"} 0
lsmstats_table_pebble_tombstones{store="test",table="99"} 0
# HELP lsmstats_table_physical_entries MVCC entries in the live SSTs: every version and every MVCC tombstone (Hummock's total_key_count).
# TYPE lsmstats_table_physical_entries gauge
lsmstats_table_physical_entries{store="test",table="1"} 15
lsmstats_table_physical_entries{store="test",table="2"} 3
lsmstats_table_physical_entries{store="test",table="99"} 2
# HELP lsmstats_table_value_bytes Value bytes of the MVCC entries in the live SSTs, apportioned by puts (Hummock's total_value_size; an estimate).
# TYPE lsmstats_table_value_bytes gauge
lsmstats_table_value_bytes{store="test",table="1"} %d
lsmstats_table_value_bytes{store="test",table="2"} %d
lsmstats_table_value_bytes{store="test",table="99"} %d
# HELP lsmstats_table_vnodes_with_data Vnodes with entries in the live SSTs.
# TYPE lsmstats_table_vnodes_with_data gauge
lsmstats_table_vnodes_with_data{store="test",table="1"} %d
lsmstats_table_vnodes_with_data{store="test",table="2"} %d
lsmstats_table_vnodes_with_data{store="test",table="99"} 1
`,
		st.Physical.NumFiles(), liveBuckets(st, def1), liveBuckets(st, def2),
		st.Physical.Table(1).TotalValueSize, st.Physical.Table(2).TotalValueSize, st.Physical.Table(99).TotalValueSize,
		vnodesWithRows(def1, 1, 10), vnodesWithRows(def2, 1, 3))
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(want)))
	require.Equal(t, int64(1), calls.Load(), "one snapshot per scrape")
	// The value bytes of table 1 are its share of the checkpoints' value
	// bytes: at least its 13 rows of 6 bytes.
	require.GreaterOrEqual(t, st.Physical.Table(1).TotalValueSize, uint64(13*6))

	problems, err := testutil.CollectAndLint(m)
	require.NoError(t, err)
	require.Empty(t, problems)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	_, err = reg.Gather()
	require.NoError(t, err)

	// A compaction merges the SSTs (into one per table, and one of the
	// metadata): the physical figures that count versions stay (no garbage
	// collection), the SST count drops, the live figures do not move; a
	// commit publishes a new snapshot (age 0 again relative to it) at the
	// next epoch.
	e.flush() // the checkpoints committed as batches: SSTs of their own
	before := e.s.Stats().Physical.NumFiles()
	e.compact()
	e.commit(3)
	after := e.s.Stats()
	require.Less(t, after.Physical.NumFiles(), before)
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(fmt.Sprintf(`
# HELP lsmstats_stats_committed_epoch Committed epoch the statistics describe.
# TYPE lsmstats_stats_committed_epoch gauge
lsmstats_stats_committed_epoch{store="test"} 3
# HELP lsmstats_stats_live_ssts Live SSTs whose statistics are summed.
# TYPE lsmstats_stats_live_ssts gauge
lsmstats_stats_live_ssts{store="test"} %d
# HELP lsmstats_table_live_rows Exact number of live rows at the committed epoch.
# TYPE lsmstats_table_live_rows gauge
lsmstats_table_live_rows{store="test",table="1"} 8
lsmstats_table_live_rows{store="test",table="2"} 3
lsmstats_table_live_rows{store="test",table="99"} 0
# HELP lsmstats_table_physical_entries MVCC entries in the live SSTs: every version and every MVCC tombstone (Hummock's total_key_count).
# TYPE lsmstats_table_physical_entries gauge
lsmstats_table_physical_entries{store="test",table="1"} 15
lsmstats_table_physical_entries{store="test",table="2"} 3
lsmstats_table_physical_entries{store="test",table="99"} 2
`, after.Physical.NumFiles())), "lsmstats_stats_committed_epoch", "lsmstats_stats_live_ssts", "lsmstats_table_live_rows", "lsmstats_table_physical_entries"))
	require.True(t, statsinternal.LiveOf(after.Live).PublishedAt().After(statsinternal.LiveOf(st.Live).PublishedAt()), "a commit publishes a new live snapshot")
}

// TestMetricsEmptyAndNil checks a store without tables and a source that
// returns an empty Snapshot (no Version, no Live): no per-table metrics, no
// age, no panic.
func TestMetricsEmptyAndNil(t *testing.T) {
	m := stats.NewMetrics(func() stats.Snapshot { return stats.Snapshot{} }, nil)
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(`
# HELP lsmstats_stats_live_ssts Live SSTs whose statistics are summed.
# TYPE lsmstats_stats_live_ssts gauge
lsmstats_stats_live_ssts 0
`), "lsmstats_stats_live_ssts", "lsmstats_table_live_rows", "lsmstats_stats_age_seconds"))

	e := openStore(t, uncompacted())
	m = stats.NewMetrics(e.s.Stats, &stats.MetricsOptions{Namespace: "x"})
	require.Equal(t, 0, testutil.CollectAndCount(m, "x_table_live_rows"))
	require.Equal(t, 1, testutil.CollectAndCount(m, "x_stats_age_seconds"))
	e.createTable(5, 8)
	require.Equal(t, 1, testutil.CollectAndCount(m, "x_table_live_rows"), "a created table is exported with 0 rows")
}

func liveBuckets(st stats.Snapshot, def lsm.TableDef) int {
	n := 0
	for v := range def.VnodeCount {
		if st.Live.Vnode(def.ID, uint16(v)).Rows != 0 || st.Physical.Vnode(def.ID, uint16(v)).Entries != 0 {
			n += len(livebuckets.Detail(statsinternal.LiveOf(st.Live), def.ID, uint16(v)).Buckets)
		}
	}
	return n
}

func vnodesWithRows(def lsm.TableDef, lo, hi uint64) int {
	seen := map[uint16]bool{}
	for i := lo; i <= hi; i++ {
		seen[def.VnodeOf(pk64(i))] = true
	}
	return len(seen)
}

// ingestWithoutCollector ingests an SST of the given keys (Pebble SETs,
// sorted here) written without the statistics collector.
func ingestWithoutCollector(t *testing.T, e *storeEnv, ks [][]byte) {
	o := &pebble.Options{Comparer: keys.Comparer}
	o.EnsureDefaults()
	wo := o.MakeWriterOptions(0, lsminternal.DB(e.s).TableFormat())
	wo.BlockPropertyCollectors = nil
	file := t.TempDir() + "/foreign.sst"
	f, err := vfs.Default.Create(file, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	for _, k := range ks {
		require.NoError(t, w.Set(k, []byte("v")))
	}
	require.NoError(t, w.Close())
	require.NoError(t, lsminternal.DB(e.s).Ingest(context.Background(), []string{file}))
}
