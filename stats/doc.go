// Package stats is the read-only contract of the per-table and per-vnode
// key statistics of an lsmstats store, for progress estimates and
// partitioned scans that read no table data. An lsm.Store's Stats returns
// a Snapshot of them; its types here are what a user reads: counts,
// estimates, partitions and the Prometheus collector.
//
// # What is here, and what is not
//
// Every type here is this package's own, with its fields and query
// methods. The machinery that maintains the statistics, which package lsm
// drives on every commit, flush, compaction and open, lives in internal
// packages named for what they hold: internal/sstsummary (the summary of
// one SST: the block property collector, Collector, registered under
// CollectorName, and the payload codec), internal/ssttracker (the Tracker
// of the live SSTs and the Version of their summaries; CheckFile,
// CountRange), internal/compactiondelta (what each compaction changed) and
// internal/livebuckets (the live buckets, their batches, splits, rescans
// and metadata rows, and the estimator's search). The per-SST summaries and
// the physical range counts serve verification, the CLI and the tests, not
// a user.
//
// Version and Live hold the machinery's snapshot, immutable once
// published, in an unexported field: one pointer, so a Snapshot is copied
// cheaply, and the queries read the machinery's structures directly (no
// copy, no extra indirection). Only the store builds them, through
// internal/statsinternal, whose hooks this package fills in when it is
// initialized; nothing outside the module can reach, let alone change,
// what they wrap. The zero Version, Live and Snapshot are empty. Counts
// and LiveCounts have the same fields as the machinery's own counts, and
// RowEstimate, RangeQuery and ScanRange as the estimator's types, so that
// the machinery answers in this package's types at no cost (Go converts
// between struct types with the same fields for free): AppendEstimates
// appends to the caller's slice in place.
//
// # Physical statistics (internal/sstsummary, internal/ssttracker)
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
// of a table (with Hummock's names), of any vnode set (a roaring bitmap),
// and (internally, CountRange) of a pk range of a vnode with bounds that
// always contain the true physical count. A Version recomputed from scratch over the same files must equal the
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
// # Live statistics (internal/livebuckets)
//
// The exact number of live rows and their bytes per (table, vnode), kept per
// pk bucket, maintained from the store's write ops (+1 insert, −1 delete, 0
// update) and committed with each checkpoint. Live.EstimateRows answers the
// live rows of a pk range of a vnode from the buckets: buckets inside the
// range count exactly; the (at most two) buckets holding its ends add to
// the bounds what they are known to hold on each side and to the estimate
// an interpolated share (below). A bucket splits when it holds more than
// max(1, rows(vnode)/SplitDivisor, rows(table)/TableBucketBudget)
// rows (finer in a table of fewer than 256 vnodes, down to 1/256 of a
// vnode, so that the table keeps about 16,384 buckets): in a large vnode no
// bucket holds more than about 1.6% of it, so the bounds are at most about
// 3% of the vnode wide whatever the churn; a
// vnode of up to SplitDivisor rows has a bucket per row and is counted
// exactly; and a table of many small vnodes keeps about TableBucketBudget
// buckets, not one per row. Live.Partition cuts a vnode set into ranges of
// about equal live rows at bucket boundaries.
//
// # Estimates inside a bucket, and why they are unbiased
//
// A backfill asks, at every checkpoint, the live rows at or below the
// cursor of every vnode in progress, and every vnode is in progress at
// once. An error that leans one way in each vnode therefore adds up over
// hundreds or thousands of vnodes, where errors that lean neither way
// cancel. The estimate is built so that they cancel:
//
//   - What the statistics know is exact. Each bucket knows whether its
//     lower bound is the pk of a live row (lowerLive), and each vnode
//     whether its smallest and largest pk anchors are (minLive, maxLive);
//     the store keeps these flags exact on every write, and a scan of a
//     first or last bucket makes the anchors the vnode's actual smallest
//     and largest live pks. A cursor at an anchor, or in a bucket with no
//     row between its anchors (every bucket of a small vnode), is counted
//     exactly, and the bounds of any other count the anchor rows that are
//     certainly on each side.
//   - A cursor is the pk of a row the backfill read, and is asked as an
//     inclusive end (RangeQuery.HiInclusive). Interpolating a pk between
//     its bucket's anchors counts the rows below it; the row at the cursor
//     itself must be counted too. Leaving it out, as [nil, cursor+0x00)
//     does, makes every vnode in progress one row short, and the figure
//     trails the truth by as many rows as the job has vnodes in progress.
//   - Where a bucket's rows spread evenly between its anchors (hashed and
//     sequential keys) n·position(cursor) + 1 is unbiased. Where they do not
//     — the children of one parent share the bytes that tell the anchors
//     apart and sit at one position, a category or a source puts all its
//     rows at one, string keys bunch in their alphabet — a fixed +1 is
//     biased, and the bias is the same in every vnode. So each bucket
//     carries its calibration: the sums, over its rows, of rank −
//     n·position (rank counts the bucket's rows at or below the row) and of
//     position. A scan sets them (a split, a recount), and every insert and
//     delete after it updates them exactly in O(1): the change depends only
//     on the position of the row (bucket.insert). The offset δ is the mean
//     residual over the rows that are not anchors, and for a cursor at a
//     random row of the bucket n·position(cursor) + δ is unbiased, however
//     unevenly rows have come and gone since the scan. A change of the
//     anchors themselves — a merge, a new smallest or largest pk of the
//     vnode — moves the sums into the new frame, where positions are an
//     affine function of the old ones (moveFrame, mergeCalibration); only
//     frames that measure different bytes need a rescan, after the
//     commit. An exclusive end, which is not a row, takes half a row less:
//     a point between two rows lies on average half a row past the earlier
//     one.
//   - The unbiased estimate is not clamped into its bounds: where the truth
//     sits at a bound (a cursor at the last row of its bucket), an estimate
//     held inside them can only err one way, and every bucket's top row
//     would bias every vnode by a fraction of a row. RowEstimate.Mean is
//     that estimate, which sums over vnodes must add; RowEstimate.Rows is
//     Mean held within [Lower, Upper], for one range on its own.
//
// TestCursorBias measures the bias per cursor on parent-child and hashed
// pks, and the accuracy matrix of package bench measures a backfill's
// figure against the truth over six pk shapes, table sizes from 10k to 1M
// rows, 1 to 4096 vnodes and four churn patterns.
//
// Queries read an index that each published vnode carries instead of its
// buckets: the 8-byte keys of the bucket bounds, and the prefix sums of
// their rows beside each bucket's flags, bound length and offset. A
// backfill's checkpoint asks one range per vnode in progress and meets the
// index cold, just after the commit that published it, so the query path
// counts cache and TLB misses: a commit lays out the vnodes it publishes
// and their indexes in vnode order, in one allocation per table (bounded
// to twice the memory of the vnodes it holds), so a checkpoint walks memory
// forwards; the search starts from a guess (where the pk lies between the
// vnode's smallest and largest pk, checked against two keys); where every
// pk of a vnode shares a prefix of 8 bytes or more (a tenant, a path, a
// hot first column), the keys are taken past it, since the whole pks'
// keys would all be equal; a bound's bytes are read only when its key and
// length cannot decide (two pks longer than 8 bytes past that prefix with
// the same first 8); and Live.AppendEstimates
// takes a whole batch of queries through each step together, so that the
// CPU overlaps their loads.
//
// The physical samples estimate the same thing less well: puts minus
// deletes below a pk counts each update that lives in another SST than the
// version it shadows, so updates concentrated in part of the pk space bias
// it by their share, until a compaction brings each prefix's versions into
// one SST (TestEstimateRowsAccuracy measures both).
//
// # Metrics (metrics.go)
//
// Metrics is a Prometheus collector that reads one Snapshot (physical and
// live statistics of one checkpoint) per scrape through a SnapshotFunc and
// exports per-table live rows and bytes, physical entries, MVCC puts and
// deletes, Pebble tombstones, whether the live counts may contain
// estimates, and per store the live SSTs, rebuilt payloads and the age of
// the statistics.
//
// # Compaction deltas (internal/compactiondelta)
//
// For each Pebble compaction the Tracker computes the change it made per
// table and vnode (entries, MVCC puts and deletes, key and value bytes,
// Pebble tombstones; Hummock's table_stats_change) from the summaries of
// its input and output files, delivers it to subscribers
// (SubscribeCompactions, which the store's tests use) from its goroutine,
// never from Pebble's callback, and exports per-table input and output
// counts through CompactionCollector, which a user scrapes as part of
// lsm's Store.Collector.
package stats
