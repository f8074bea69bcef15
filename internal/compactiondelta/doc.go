// Package compactiondelta holds what one Pebble compaction changed in the
// physical statistics, per table and vnode (Hummock's table_stats_change,
// at vnode granularity): the delta types, the Builder that sums a delta
// from the summaries of the compaction's input and output SSTs
// (Σ outputs − Σ inputs; a file in both, a move, is left out by the
// caller), and the Feed that delivers deltas to subscribers and exports
// their cumulative per-table counts to Prometheus.
//
// The tracker of the live SSTs (internal/ssttracker) queues each
// compaction that Pebble reports, resolves it against the summaries it
// holds (its delta.go says when a compaction is resolved and which files
// are missing) and publishes the deltas to its Feed.
package compactiondelta
