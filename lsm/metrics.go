package lsm

import (
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
)

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
	add := func(subsystem, name, help string, kind prometheus.ValueType, value func(m *lsminternal.Metrics, g *lsminternal.GCMetrics) float64) {
		c.metrics = append(c.metrics, storeMetric{desc: desc(subsystem, name, help), kind: kind, value: value})
	}
	counter, gauge := prometheus.CounterValue, prometheus.GaugeValue
	type m = lsminternal.Metrics
	type g = lsminternal.GCMetrics
	add("store", "commits_total", "Checkpoints committed.", counter, func(m *m, _ *g) float64 { return float64(m.Commits) })
	add("store", "spills_total", "Writer buffers spilled to staged SSTs under memory pressure.", counter, func(m *m, _ *g) float64 { return float64(m.Spills) })
	add("store", "spilled_bytes_total", "Bytes of the spilled buffers.", counter, func(m *m, _ *g) float64 { return float64(m.SpilledBytes) })
	add("store", "commit_stalls_total", "Commits and GC batches that found L0 at Options.L0StopSublevels and waited.", counter, func(m *m, _ *g) float64 { return float64(m.CommitStalls) })
	add("store", "commit_stalls_abandoned_total", "Stalled commits that went on with L0 still deep (compactions failing or none running, or Options.L0StallLimit).", counter, func(m *m, _ *g) float64 { return float64(m.CommitStallsAbandoned) })
	add("store", "commit_stall_seconds_total", "Time stalled commits waited for L0.", counter, func(m *m, _ *g) float64 { return m.CommitStallTime.Seconds() })
	add("store", "pebble_write_stalls_total", "Pebble's own write stalls (memtable writes).", counter, func(m *m, _ *g) float64 { return float64(m.PebbleWriteStalls) })
	add("store", "buffered_bytes", "Memory held by writers' buffers now.", gauge, func(m *m, _ *g) float64 { return float64(m.BufferedBytes) })
	add("store", "bucket_scans_total", "Scans of live-statistics buckets (splits of buckets that grew too big, recalibrations).", counter, func(m *m, _ *g) float64 { return float64(m.BucketScans) })
	add("store", "bucket_scan_rows_total", "Rows read by the bucket scans.", counter, func(m *m, _ *g) float64 { return float64(m.BucketScanRows) })
	add("store", "corruptions_total", "Corrupt blocks Pebble met; each read that met one returned an error naming the file.", counter, func(m *m, _ *g) float64 { return float64(m.Corruptions) })
	add("store", "l0_sublevels", "Sublevels of L0 now.", gauge, func(m *m, _ *g) float64 { return float64(m.L0Sublevels) })
	add("store", "l0_files", "Files in L0 now.", gauge, func(m *m, _ *g) float64 { return float64(m.L0Files) })
	add("gc", "passes_total", "GC passes.", counter, func(_ *m, g *g) float64 { return float64(g.Passes) })
	add("gc", "examined_total", "Versions GC examined.", counter, func(_ *m, g *g) float64 { return float64(g.Examined) })
	add("gc", "deleted_total", "Versions GC deleted.", counter, func(_ *m, g *g) float64 { return float64(g.Deleted) })
	add("gc", "deleted_bytes_total", "Bytes of the versions GC deleted.", counter, func(_ *m, g *g) float64 { return float64(g.DeletedBytes) })
	add("gc", "ingestions_total", "Batches of deletes GC ingested.", counter, func(_ *m, g *g) float64 { return float64(g.Ingestions) })
	add("gc", "compactions_total", "Manual compactions of vnode ranges (Store.CompactRange).", counter, func(_ *m, g *g) float64 { return float64(g.Compactions) })
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
	value func(*lsminternal.Metrics, *lsminternal.GCMetrics) float64
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics {
		ch <- m.desc
	}
	c.deltas.Describe(ch)
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	m, g := c.s.counters(), c.s.gcCounters()
	for _, x := range c.metrics {
		ch <- prometheus.MustNewConstMetric(x.desc, x.kind, x.value(&m, &g))
	}
	c.deltas.Collect(ch)
}
