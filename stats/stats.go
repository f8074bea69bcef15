package stats

import "github.com/lsmstats/lsmstats/internal/keystats"

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
	// of live SSTs. Its methods: Vnode, Vnodes, Sum, Table, Tables (counts
	// of MVCC entries, puts, deletes, prefixes, Pebble tombstones; table
	// totals like Hummock's TableStats), Range (a pk range's counts,
	// estimated with bounds from the SSTs' samples), File, Files, NumFiles,
	// Rebuilt (SSTs whose property was unusable) and Diff.
	Version = keystats.Version
	// FileInfo is one live SST of a Version, with its summary.
	FileInfo = keystats.FileInfo
	// FileError is an SST whose summary was rebuilt, and why.
	FileError = keystats.FileError
	// FileSummary is an SST's counts per (table, vnode), from its
	// statistics property; TableSummary and VnodeSummary are its parts.
	FileSummary  = keystats.FileSummary
	TableSummary = keystats.TableSummary
	VnodeSummary = keystats.VnodeSummary
	// SummarySource says where a FileInfo's summary came from.
	SummarySource = keystats.SummarySource
	// Counts are physical counts: MVCC entries, puts, deletes, prefixes.
	Counts = keystats.Counts
	// TableTotals are a table's physical totals, like Hummock's TableStats.
	TableTotals = keystats.TableTotals
	// RangeCounts estimate the physical counts of a pk range of a vnode,
	// each an Estimate.
	RangeCounts = keystats.RangeCounts
	Estimate    = keystats.Estimate

	// Live is an immutable view of the live statistics of every table. Its
	// methods: Vnode, Table, Sum and Tables (exact live rows and bytes);
	// EstimateRows and AppendEstimates (the live rows of pk ranges: an
	// unbiased estimate within bounds that always hold the truth; asked
	// together, many ranges cost less); Partition (ranges of about equal
	// rows); Detail (a vnode's buckets); ContainsEstimates (whether
	// unchecked writes left estimated counts); BucketCount; PublishedAt.
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
	// VnodeDetail is a vnode's live buckets and pk anchors (Live.Detail).
	VnodeDetail = keystats.VnodeDetail
	// VnodeStats are one vnode's (or a set's) physical and live counts.
	VnodeStats = keystats.VnodeStats
	Bucket     = keystats.Bucket

	// Metrics exports a store's statistics to Prometheus.
	Metrics = keystats.Metrics
	// MetricsOptions configure Metrics.
	MetricsOptions = keystats.MetricsOptions
)

// Where a FileInfo's summary came from.
const (
	// FromPayload: decoded from the SST's statistics property.
	FromPayload = keystats.FromPayload
	// FromVirtualScan: a virtual SST, whose backing file's keys within its
	// bounds were classified.
	FromVirtualScan = keystats.FromVirtualScan
	// FromRebuild: the property was missing, corrupt or inconsistent with
	// Pebble's NumEntries; the SST's keys were classified instead.
	FromRebuild = keystats.FromRebuild
)

// CollectorName is the name of the block property collector, and of the
// SST user property that holds each SST's statistics payload.
const CollectorName = keystats.CollectorName

var (
	// ErrCorruptPayload marks a statistics property that cannot be decoded.
	ErrCorruptPayload = keystats.ErrCorruptPayload
	// ErrCorruptLive marks a live-statistics metadata row that cannot be
	// decoded.
	ErrCorruptLive = keystats.ErrCorruptLive
)

// NewMetrics returns a Prometheus collector of the statistics that source
// returns at each scrape.
func NewMetrics(source SnapshotFunc, opts *MetricsOptions) *Metrics {
	return keystats.NewMetrics(source, opts)
}
