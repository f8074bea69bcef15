package lsm

import (
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a store's operational counters, cumulative since Open, and
// a few gauges of its state now: what Store.Collector exports to
// Prometheus, as a struct for a caller that logs or exports them another
// way. The zero value is a store that has done nothing.
type Metrics struct {
	// Commits counts the checkpoints committed. Spills and SpilledBytes
	// count the writers' buffers spilled to staged SSTs above
	// Options.MemoryWatermark, and their bytes.
	Commits, Spills, SpilledBytes int64
	// CommitStalls counts the commits and GC batches that found L0 at
	// Options.L0StopSublevels (none while automatic compactions are off:
	// nothing would drain L0), and CommitStallTime their total wait.
	// CommitStallsAbandoned counts those that went on with L0 still deep:
	// compactions failing, none running (then later ones do not wait until
	// one succeeds again), or Options.L0StallLimit.
	CommitStalls, CommitStallsAbandoned int64
	CommitStallTime                     time.Duration
	// PebbleWriteStalls counts Pebble's own write stalls (memtable writes:
	// checkpoints committed as batches, Options.CommitBatchBytes).
	PebbleWriteStalls int64
	// BufferedBytes is the memory held by writers' buffers now.
	BufferedBytes int64
	// BucketScans and BucketScanRows count the scans of live-statistics
	// buckets (splits of buckets that grew too big, recalibrations) and the
	// rows they read.
	BucketScans, BucketScanRows int64
	// Corruptions counts the corrupt blocks Pebble met (its DataCorruption
	// events): each read that met one returned an error naming the file.
	Corruptions int64
	// L0Sublevels and L0Files are L0's shape now (zero once the store is
	// closed).
	L0Sublevels int
	L0Files     int64
	// GCPasses counts the GC passes (Store.GC calls); GCExamined,
	// GCDeleted and GCDeletedBytes the versions they examined and deleted
	// and the bytes of those deleted; GCIngestions the batches of deletes
	// they ingested; GCCompactions the manual compactions of vnode ranges
	// (Store.CompactRange).
	GCPasses, GCExamined, GCDeleted, GCDeletedBytes, GCIngestions, GCCompactions int64
	// Backups and BackupBytes count the backups the store uploaded
	// (Store.Backup) and their bytes; BackupSweptObjects the objects that
	// the sweeps between backups removed (SSTs only older backups kept).
	Backups, BackupBytes, BackupSweptObjects int64
}

// Metrics returns the store's counters (Metrics). It is safe to call
// concurrently with anything, Close included.
func (s *Store) Metrics() Metrics {
	m := s.counters()
	g := &s.gc
	m.GCPasses, m.GCExamined, m.GCDeleted = g.passes.Load(), g.examined.Load(), g.deleted.Load()
	m.GCDeletedBytes, m.GCIngestions, m.GCCompactions = g.deletedBytes.Load(), g.ingestions.Load(), g.compactions.Load()
	return m
}

// PebbleMetrics returns the metrics of the Pebble database under the
// store: its LSM levels (files, sizes, bytes flushed, ingested and
// compacted into each: the write amplification), compactions, memtables,
// caches and WAL. The store's checkpoints reach Pebble as ingestions (or
// as batches through the memtable: Options.CommitBatchBytes) and its
// statistics' metadata rows are Pebble keys too, so these count them all.
// After Close it returns ErrClosed. It is safe for concurrent use; it
// takes Pebble's mutex and walks the LSM version, so a caller polling it
// often pays for that.
func (s *Store) PebbleMetrics() (*pebble.Metrics, error) {
	s.pebbleMetricsMu.Lock()
	defer s.pebbleMetricsMu.Unlock()
	if s.closed.Load() { // a closed Pebble has no metrics
		return nil, errors.Wrapf(ErrClosed, "store %s", s.dir)
	}
	return s.db.Metrics(), nil
}

// Collector returns a Prometheus collector of the store's operational
// counters, beside the statistics of stats.NewMetrics: commits, spills,
// commit stalls (the store's L0 waits) and Pebble's write stalls, writers'
// buffered bytes, bucket scans of the live statistics, corrupt blocks met,
// L0's shape, the cumulative GC counters, and what Pebble's compactions
// changed per table (the statistics' compaction deltas: entries, MVCC
// deletes, Pebble tombstones and key bytes of their inputs and outputs,
// lsmstats_compaction_*{table,side}, so that rate(output) − rate(input) is
// what compactions remove). Like stats.NewMetrics it reads the counters at
// each scrape and keeps nothing; give both the same options (namespace,
// constant labels) to tell several stores apart. opts.Now is not used.
func (s *Store) Collector(opts *stats.MetricsOptions) prometheus.Collector {
	var o stats.MetricsOptions
	if opts != nil {
		o = *opts
	}
	desc := func(subsystem, name, help string, labels ...string) *prometheus.Desc {
		return statsinternal.MetricDesc(o.Namespace, o.ConstLabels, subsystem, name, help, labels...)
	}
	deltas := s.tracker.CompactionCollector(func(name, help string, labels ...string) *prometheus.Desc {
		return desc("", name, help, labels...)
	})
	c := &storeCollector{s: s, deltas: deltas}
	add := func(subsystem, name, help string, kind prometheus.ValueType, value func(*Metrics) float64) {
		c.metrics = append(c.metrics, storeMetric{desc: desc(subsystem, name, help), kind: kind, value: value})
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	add("store", "commits_total", "Checkpoints committed.", counter, func(m *Metrics) float64 { return float64(m.Commits) })
	add("store", "spills_total", "Writer buffers spilled to staged SSTs under memory pressure.", counter, func(m *Metrics) float64 { return float64(m.Spills) })
	add("store", "spilled_bytes_total", "Bytes of the spilled buffers.", counter, func(m *Metrics) float64 { return float64(m.SpilledBytes) })
	add("store", "commit_stalls_total", "Commits and GC batches that found L0 at Options.L0StopSublevels and waited.", counter, func(m *Metrics) float64 { return float64(m.CommitStalls) })
	add("store", "commit_stalls_abandoned_total", "Stalled commits that went on with L0 still deep (compactions failing or none running, or Options.L0StallLimit).", counter, func(m *Metrics) float64 { return float64(m.CommitStallsAbandoned) })
	add("store", "commit_stall_seconds_total", "Time stalled commits waited for L0.", counter, func(m *Metrics) float64 { return m.CommitStallTime.Seconds() })
	add("store", "pebble_write_stalls_total", "Pebble's own write stalls (memtable writes).", counter, func(m *Metrics) float64 { return float64(m.PebbleWriteStalls) })
	add("store", "buffered_bytes", "Memory held by writers' buffers now.", gauge, func(m *Metrics) float64 { return float64(m.BufferedBytes) })
	add("store", "bucket_scans_total", "Scans of live-statistics buckets (splits of buckets that grew too big, recalibrations).", counter, func(m *Metrics) float64 { return float64(m.BucketScans) })
	add("store", "bucket_scan_rows_total", "Rows read by the bucket scans.", counter, func(m *Metrics) float64 { return float64(m.BucketScanRows) })
	add("store", "corruptions_total", "Corrupt blocks Pebble met; each read that met one returned an error naming the file.", counter, func(m *Metrics) float64 { return float64(m.Corruptions) })
	add("store", "l0_sublevels", "Sublevels of L0 now.", gauge, func(m *Metrics) float64 { return float64(m.L0Sublevels) })
	add("store", "l0_files", "Files in L0 now.", gauge, func(m *Metrics) float64 { return float64(m.L0Files) })
	add("backup", "backups_total", "Backups uploaded (Store.Backup).", counter, func(m *Metrics) float64 { return float64(m.Backups) })
	add("backup", "bytes_total", "Bytes of the backups uploaded.", counter, func(m *Metrics) float64 { return float64(m.BackupBytes) })
	add("backup", "swept_objects_total", "Objects the sweeps between backups removed (SSTs only older backups kept).", counter, func(m *Metrics) float64 { return float64(m.BackupSweptObjects) })
	add("gc", "passes_total", "GC passes.", counter, func(m *Metrics) float64 { return float64(m.GCPasses) })
	add("gc", "examined_total", "Versions GC examined.", counter, func(m *Metrics) float64 { return float64(m.GCExamined) })
	add("gc", "deleted_total", "Versions GC deleted.", counter, func(m *Metrics) float64 { return float64(m.GCDeleted) })
	add("gc", "deleted_bytes_total", "Bytes of the versions GC deleted.", counter, func(m *Metrics) float64 { return float64(m.GCDeletedBytes) })
	add("gc", "ingestions_total", "Batches of deletes GC ingested.", counter, func(m *Metrics) float64 { return float64(m.GCIngestions) })
	add("gc", "compactions_total", "Manual compactions of vnode ranges (Store.CompactRange).", counter, func(m *Metrics) float64 { return float64(m.GCCompactions) })
	return c
}

// storeCollector is Store.Collector's collector.
type storeCollector struct {
	s       *Store
	metrics []storeMetric
	deltas  prometheus.Collector // the compaction deltas
}

type storeMetric struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*Metrics) float64
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
	c.deltas.Describe(ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.s.Metrics()
	for _, x := range c.metrics {
		ch <- prometheus.MustNewConstMetric(x.desc, x.kind, x.value(&m))
	}
	c.deltas.Collect(ch)
}
