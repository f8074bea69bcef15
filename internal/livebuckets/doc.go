// Package livebuckets holds the live statistics of a store: the exact
// number of live rows and their bytes per (table, vnode), kept per pk
// bucket, and how they change. A Snapshot is an immutable view of them; a
// State owns the current one and what of it is persisted; a Batch
// applies a commit's live deltas to private copies of the vnodes it
// touches and publishes them; buckets that grew too big or lost their
// calibration are rescanned after the commit (rescan.go), or split at
// once when rows were appended (appendsplit.go, which also defers the
// calibration of such rows to one settle per run). What a commit changed is
// persisted with it (persist.go, docs/format.md): for the vnodes that
// have bucket rows, one delta-log row of their changes of bounds and counts
// (log.go; compressed with zstd when that is shorter, since format 3); for new vnodes, their bucket rows (meta.go), a fold; and while
// the log outweighs a rewrite of the buckets it changed, a fold of the
// vnodes whose changes reach furthest back, a sixteenth at a time, which
// deletes the log rows no vnode needs any more. Loading replays the log on the bucket rows.
// Published vnodes
// carry the index that the estimates read (vnode.go, arena.go, probe.go,
// estimate.go).
//
// Package stats wraps a Snapshot in stats.Live, whose methods are the
// read-only queries a user asks; its package documentation explains the
// buckets, the estimator and why it is unbiased. stats.LiveCounts is the
// public twin of Counts, and the estimate functions answer in stats' types
// through type parameters (estimate.go).
//
// # Buckets
//
// CockroachDB keeps an exact LiveCount per range by reading before writing;
// we keep the same exact counts, but resolved in space: each vnode's pk range
// is cut into buckets [lower, next lower), each with the exact number of live
// rows and live bytes (pk + row) in it. Counts change only at commit, from the
// ops' live deltas (+1 insert, −1 delete, 0 update), so they are exact
// whenever the ops were consistent (checked writers read before writing; an
// unchecked writer flags the table as possibly containing estimates).
//
// Why buckets and not only the physical samples of each SST: a pk range's
// live rows cannot be bounded tightly from per-SST counts. An update written
// in a newer SST shadows a version in an older one, and no SST knows which of
// its puts are shadowed, so from physical counts alone a range's live rows are
// known only up to the number of such updates in the whole vnode (30% of it
// under update churn). Buckets make every range query exact except for the
// two buckets that hold its end points, which are bounded by what their
// anchors are known to hold and estimated by a calibrated interpolation of
// the pk inside the bucket (package stats says why it is unbiased).
//
// Bucket sizes follow the vnode: a bucket splits when it holds more than
// splitLimit rows — max(MinSplitRows, rows(vnode)/SplitDivisor,
// rows(table)/TableBucketBudget), where in a table of fewer vnodes than
// TableTargetBuckets/SplitDivisor (256) rows(vnode)/SplitDivisor gives way
// to the larger of rows(vnode)/MaxSplitDivisor and
// rows(table)/TableTargetBuckets — and a bucket merges into its left
// neighbour when it is empty or the two together hold less than half of
// that. A split needs the exact count of each piece, which the store gets by scanning the bucket's
// rows once after the commit that made it too big (BucketScan, which also
// calibrates each piece); each row is scanned O(log growth) times over the
// life of a vnode, like a B-tree's splits. With SplitDivisor 64 no bucket
// of a large vnode holds more than 1.6% of it, so the bounds of any range
// are at most 3.1% of the vnode wide.
//
// A Snapshot is immutable, safe for concurrent use. A State is not safe
// for concurrent use (the store serialises commits).
package livebuckets
