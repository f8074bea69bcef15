package stats

// Prometheus metrics of a store's statistics.
//
// A Metrics is a prometheus.Collector that reads one Snapshot per scrape,
// through a SnapshotFunc, and turns it into constant metrics: nothing is
// kept between scrapes, so the figures of one scrape always describe one
// checkpoint (the physical and live sides of the same Snapshot) and there is
// no second copy of the statistics to keep current. The package does not
// import the store: the store's Stats method is a SnapshotFunc:
//
//	m := stats.NewMetrics(store.Stats, nil)
//	prometheus.MustRegister(m)
//
// Exported, per table (label "table", the table id in decimal): live rows
// and bytes, physical entries (Hummock's total_key_count), MVCC puts, MVCC
// deletes, Pebble tombstones, key and (estimated) value bytes, vnodes with
// data, live buckets, and whether the live counts may contain estimates
// (unchecked writers, like CockroachDB's ContainsEstimates). Per store: live
// SSTs, SSTs whose payload was rebuilt from their keys and virtual SSTs
// whose summary was scanned, the committed epoch, the age of the live
// snapshot (seconds since the statistics were last published: every commit
// publishes, so a growing age means commits stopped and estimates drift
// from the table), and whether the physical statistics are stale (their
// last refresh failed).

import (
	"strconv"
	"time"

	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricsOptions configures a Metrics. The zero value (or nil) takes the
// defaults noted.
type MetricsOptions struct {
	// Namespace prefixes every metric name; empty means "lsmstats".
	Namespace string
	// ConstLabels are added to every metric, e.g. {"store": "a"} to tell
	// several stores apart.
	ConstLabels prometheus.Labels
	// Now returns the current time, for the age gauge; nil means time.Now.
	Now func() time.Time
}

// withDefaults returns the options with the defaults noted filled in (o
// may be nil).
func (o *MetricsOptions) withDefaults() MetricsOptions {
	var out MetricsOptions
	if o != nil {
		out = *o
	}
	if out.Namespace == "" {
		out.Namespace = statsinternal.DefaultNamespace
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out
}

// desc returns the descriptor of a metric under the options' namespace,
// with their constant labels (the store's collector names its own the
// same way, lsm.Store.Collector).
func (o MetricsOptions) desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return statsinternal.MetricDesc(o.Namespace, o.ConstLabels, subsystem, name, help, labels...)
}

// Metrics exports a store's statistics to Prometheus. It implements
// prometheus.Collector and is safe for concurrent use.
type Metrics struct {
	source SnapshotFunc
	now    func() time.Time

	tableDescs                                    []tableMetric
	liveSSTs, rebuilt, virtual, epoch, age, stale *prometheus.Desc
}

var _ prometheus.Collector = (*Metrics)(nil)

// tableMetric is one per-table gauge and how to read it.
type tableMetric struct {
	desc  *prometheus.Desc
	value func(s *Snapshot, table uint32) float64
}

// NewMetrics returns a collector that reads its figures from source. A nil
// opts means the defaults.
func NewMetrics(source SnapshotFunc, opts *MetricsOptions) *Metrics {
	o := opts.withDefaults()
	m := &Metrics{source: source, now: o.Now}
	desc := o.desc
	table := func(name, help string, value func(s *Snapshot, table uint32) float64) {
		m.tableDescs = append(m.tableDescs, tableMetric{desc: desc("table", name, help, "table"), value: value})
	}
	phys := func(s *Snapshot, t uint32) TableTotals { return s.Physical.Table(t) }
	table("live_rows", "Exact number of live rows at the committed epoch.",
		func(s *Snapshot, t uint32) float64 { return float64(s.Live.Table(t).Rows) })
	table("live_bytes", "Bytes of the live rows (pk and row) at the committed epoch.",
		func(s *Snapshot, t uint32) float64 { return float64(s.Live.Table(t).Bytes) })
	table("physical_entries", "MVCC entries in the live SSTs: every version and every MVCC tombstone (Hummock's total_key_count).",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).TotalKeyCount) })
	table("mvcc_puts", "MVCC put versions in the live SSTs.",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).Counts.Puts) })
	table("mvcc_deletes", "MVCC delete versions (tombstones of rows) in the live SSTs.",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).Counts.Deletes) })
	table("pebble_tombstones", "Pebble point tombstones written by MVCC garbage collection, in the live SSTs.",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).PebbleTombstones) })
	table("key_bytes", "User key bytes of the MVCC entries in the live SSTs (Hummock's total_key_size).",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).TotalKeySize) })
	table("value_bytes", "Value bytes of the MVCC entries in the live SSTs, apportioned by puts (Hummock's total_value_size; an estimate).",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).TotalValueSize) })
	table("vnodes_with_data", "Vnodes with entries in the live SSTs.",
		func(s *Snapshot, t uint32) float64 { return float64(phys(s, t).Vnodes) })
	table("live_buckets", "Buckets of the live statistics (their memory; each range estimate is exact but for two buckets).",
		func(s *Snapshot, t uint32) float64 { return float64(s.Live.s.TableBuckets(t)) })
	table("live_contains_estimates", "1 if the live counts were built from unchecked ops and may contain estimates, else 0.",
		func(s *Snapshot, t uint32) float64 {
			if s.Live.ContainsEstimates(t) {
				return 1
			}
			return 0
		})
	m.liveSSTs = desc("stats", "live_ssts", "Live SSTs whose statistics are summed.")
	m.rebuilt = desc("stats", "rebuilt_payloads", "Live SSTs whose statistics payload was missing, corrupt or inconsistent and was rebuilt from their keys.")
	m.virtual = desc("stats", "virtual_ssts", "Live virtual SSTs, whose statistics were computed from their backing file's keys.")
	m.epoch = desc("stats", "committed_epoch", "Committed epoch the statistics describe.")
	m.age = desc("stats", "age_seconds", "Seconds since the live statistics were last published (by a commit, a bucket split, or the store's open).")
	m.stale = desc("stats", "physical_stale", "1 if the last refresh of the physical statistics failed, so that they describe an earlier set of SSTs until a retry succeeds, else 0.")
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, tm := range m.tableDescs {
		ch <- tm.desc
	}
	ch <- m.liveSSTs
	ch <- m.rebuilt
	ch <- m.virtual
	ch <- m.epoch
	ch <- m.age
	ch <- m.stale
}

// Collect implements prometheus.Collector: it reads one Snapshot.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.source()
	phys := s.Physical.version()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range mergeTables(s.Live.Tables(), s.Physical.Tables()) {
		label := strconv.FormatUint(uint64(t), 10)
		for _, tm := range m.tableDescs {
			gauge(tm.desc, tm.value(&s, t), label)
		}
	}
	files := ssttracker.Files(phys)
	virtual := 0
	for i := range files {
		if files[i].Virtual {
			virtual++
		}
	}
	gauge(m.liveSSTs, float64(len(files)))
	gauge(m.rebuilt, float64(len(ssttracker.Rebuilt(phys))))
	gauge(m.virtual, float64(virtual))
	gauge(m.epoch, float64(s.CommittedEpoch))
	stale := 0.0
	if s.PhysicalErr != nil {
		stale = 1
	}
	gauge(m.stale, stale)
	if at := s.Live.s.PublishedAt(); !at.IsZero() {
		gauge(m.age, max(0, m.now().Sub(at).Seconds()))
	}
}

// mergeTables returns the union of two increasing id lists.
func mergeTables(a, b []uint32) []uint32 {
	out := make([]uint32, 0, max(len(a), len(b)))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}
