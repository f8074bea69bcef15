package stats

import (
	"github.com/lsmstats/lsmstats/internal/keystats"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
)

// A Snapshot and what it holds.
type (
	// Snapshot is one consistent view of a store's statistics at a
	// committed epoch: the physical statistics of the live SSTs and the
	// exact live statistics. Its methods: Vnode and Sum (both sides'
	// counts of a vnode or a set), EstimateRows, AppendEstimates and
	// Partition (of Live).
	Snapshot = keystats.Snapshot
	// SnapshotFunc returns the current Snapshot (lsm.Store.Stats does).
	SnapshotFunc = keystats.SnapshotFunc

	// Version is an immutable view of the physical statistics over one set
	// of live SSTs. Its methods: Vnode, Vnodes, Sum, Table and Tables
	// (counts of MVCC entries, puts, deletes, prefixes, Pebble tombstones;
	// table totals like Hummock's TableStats) and NumFiles (the live SSTs).
	Version = ssttracker.Version
	// Counts are physical counts: MVCC entries, puts, deletes, prefixes.
	Counts = sstsummary.Counts
	// TableTotals are a table's physical totals, like Hummock's TableStats.
	TableTotals = ssttracker.TableTotals

	// Live is an immutable view of the live statistics of every table. Its
	// methods: Vnode, Table, Sum and Tables (exact live rows and bytes);
	// EstimateRows and AppendEstimates (the live rows of pk ranges: an
	// unbiased estimate within bounds that always hold the truth; asked
	// together, many ranges cost less); Partition (ranges of about equal
	// rows); ContainsEstimates (whether unchecked writes left estimated
	// counts).
	//
	// The methods of these aliases are documented with their types in
	// internal/keystats (go doc ./internal/keystats Live).
	Live = keystats.Live
	// LiveCounts are live rows and their bytes.
	LiveCounts = keystats.LiveCounts
	// RangeQuery is one pk range of a vnode, asked of Live.AppendEstimates.
	RangeQuery = keystats.RangeQuery
	// RowEstimate is the live rows of a pk range: an unbiased estimate and
	// bounds that hold them.
	RowEstimate = keystats.RowEstimate
	// ScanRange is one part of a partition of a table's vnodes into ranges
	// of about equal live rows (Live.Partition).
	ScanRange = keystats.ScanRange
	// VnodeStats are one vnode's (or a set's) physical and live counts.
	VnodeStats = keystats.VnodeStats

	// Metrics exports a store's statistics to Prometheus.
	Metrics = keystats.Metrics
	// MetricsOptions configure Metrics.
	MetricsOptions = keystats.MetricsOptions
)

// NewMetrics returns a Prometheus collector of the statistics that source
// returns at each scrape.
func NewMetrics(source SnapshotFunc, opts *MetricsOptions) *Metrics {
	return keystats.NewMetrics(source, opts)
}

// The sizes of the live statistics' buckets: a bucket splits when it holds
// more than max(1, rows(vnode)/SplitDivisor, rows(table)/budget) rows, where
// budget is the store's Options.StatsBucketBudget, by default
// TableBucketBudget.
const (
	SplitDivisor      = keystats.SplitDivisor
	TableBucketBudget = keystats.TableBucketBudget
)
