// Package stats maintains per-table and per-vnode key statistics of an
// lsmstats store, for progress estimates and partitioned scans that read no
// table data.
//
// # Physical statistics (collector.go, payload.go, version.go, tracker.go)
//
// These count what the LSM holds, like Hummock's TableStats but at vnode
// granularity: MVCC entries (every version and every MVCC tombstone until
// compaction removes it; Hummock's total_key_count), MVCC puts and deletes,
// user key bytes, distinct MVCC prefixes per SST and how many of them have a
// put as their newest entry, and the Pebble tombstones that MVCC GC writes.
//
// A Pebble block property collector (Collector, registered under
// CollectorName) classifies the keys of every SST that Pebble flushes or
// compacts, and of every SST the store writes itself for ingestion, and
// stores a FileSummary in the SST's properties: the counts per (table, vnode)
// and, per vnode, an ordered sample of pk positions with cumulative puts,
// deletes, head puts and prefixes. Values are never read; the MVCC kind lives
// in the key.
//
// A Tracker sums the summaries over the live SSTs and keeps the sum current
// as files come and go, reading only the new files' properties on each
// refresh. Each refresh publishes an immutable Version: counts of one vnode,
// of a table (with Hummock's names), of any vnode set (a roaring bitmap), and
// of a pk range of a vnode with bounds that always contain the true physical
// count. A Version recomputed from scratch over the same files must equal the
// incremental one, and every SST must satisfy
//
//	Σ (Entries + PebbleTombstones) + MetaKeys + Foreign + NumRangeDeletions == NumEntries
//
// against Pebble's own NumEntries (CheckFile).
//
// Physical counts are not live rows: an update adds an entry, a delete adds
// one too, and distinct prefixes summed over SSTs overcount keys that live in
// several SSTs. Puts minus deletes below a pk tracks live rows far better
// than entries do under churn, which is why the samples carry both.
//
// # Live statistics (live.go, estimate.go; written separately)
//
// The exact number of live rows and their bytes per (table, vnode) and pk
// bucket, maintained from the store's write ops and committed with each
// checkpoint, and the estimators on top (rows in a pk range, balanced
// partitions) live in live.go and estimate.go of this package.
package stats
