package stats

import (
	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
)

// The sizes of the live statistics' buckets: a bucket splits when it holds
// more than max(1, rows(vnode)/SplitDivisor, rows(table)/budget) rows, where
// budget is the store's Options.StatsBucketBudget, by default
// TableBucketBudget. In a table of fewer than 256 vnodes the buckets split
// finer, down to 1/256 of a vnode, until the table has about 16,384 of them
// (what 256 vnodes have): a progress figure's error counts against its
// table, and a vnode's averages out over many vnodes, not over one or four.
const (
	// SplitDivisor sets the largest bucket to 1/SplitDivisor of its vnode.
	SplitDivisor = 64
	// TableBucketBudget bounds the buckets of one table: a bucket may hold
	// at least 1/TableBucketBudget of its table's rows, so a table of many
	// small vnodes keeps about TableBucketBudget buckets, not one per row.
	TableBucketBudget = 1 << 16
)

// Live is an immutable view of the exact live statistics of every table:
// live rows and their bytes per (table, vnode), kept per pk bucket, as of a
// committed epoch. Its queries read only the buckets, never the table's
// rows. The zero Live is empty: every count is zero. Safe for concurrent
// use.
type Live struct {
	s *livebuckets.Snapshot
}

// Vnode returns the live counts of one vnode.
func (l Live) Vnode(table uint32, vnode uint16) LiveCounts {
	return LiveCounts(l.s.Vnode(table, vnode))
}

// Table returns the live counts of a table.
func (l Live) Table(table uint32) LiveCounts { return LiveCounts(l.s.Table(table)) }

// Sum returns the live counts of a set of vnodes of a table.
func (l Live) Sum(table uint32, vnodes *roaring.Bitmap) LiveCounts {
	return LiveCounts(l.s.Sum(table, vnodes))
}

// Tables returns the ids of the tables the statistics know (every table
// of the store's catalog, with rows or not), in increasing order.
func (l Live) Tables() []uint32 { return l.s.Tables() }

// ContainsEstimates reports whether a table's live counts were built from
// unchecked ops (lsm.WriterOptions.Unchecked) since they were last
// recomputed: then they, and the estimates, may be off.
func (l Live) ContainsEstimates(table uint32) bool { return l.s.ContainsEstimates(table) }

// EstimateRows estimates the live rows of a vnode whose pk lies in [lo, hi);
// nil means unbounded. Buckets entirely inside the range count exactly; a
// bucket holding an end point contributes what it is known to hold below
// the end point to the lower bound, what it may hold to the upper bound,
// and an unbiased estimate between them (see the package documentation).
func (l Live) EstimateRows(table uint32, vnode uint16, lo, hi []byte) RowEstimate {
	return livebuckets.EstimateRows[RowEstimate](l.s, table, vnode, lo, hi)
}

// AppendEstimates appends to dst the estimate of each query, in order.
// It answers them together, which is what a backfill's checkpoint asks (one
// range per vnode in progress): each query is a chain of dependent memory
// loads, cold after a commit, and taking all the queries through each step
// of the chain before the next lets the CPU overlap the loads of different
// queries. Asked together, many ranges cost less than one by one.
func (l Live) AppendEstimates(dst []RowEstimate, table uint32, qs []RangeQuery) []RowEstimate {
	return livebuckets.AppendEstimates(l.s, dst, table, qs)
}

// Partition cuts the live rows of a set of vnodes into at most n ranges of
// about equal size, at bucket boundaries (as GreptimeDB balances scan
// partitions by row counts), so each range's row count is exact and ranges
// differ from the ideal size by at most about one bucket (≤ 1.6% of a
// vnode).
func (l Live) Partition(table uint32, vnodes *roaring.Bitmap, n int) []ScanRange {
	return livebuckets.Partition[ScanRange](l.s, table, vnodes, n)
}

// LiveCounts are live rows and live bytes (pk + row bytes of each live row).
// The zero value is no rows.
type LiveCounts struct {
	Rows  int64
	Bytes int64
}

// Add returns c + o.
func (c LiveCounts) Add(o LiveCounts) LiveCounts {
	return LiveCounts{Rows: c.Rows + o.Rows, Bytes: c.Bytes + o.Bytes}
}

// RangeQuery is a range of Live.AppendEstimates: the live rows of Vnode
// with pk in [Lo, Hi), or [Lo, Hi] when HiInclusive; a nil Lo or Hi is
// unbounded.
//
// An inclusive Hi is how a backfill asks for the rows behind its cursor,
// and it is estimated as what a cursor is: the pk of a row the caller read.
// Within the bucket that holds it, the estimate counts on that row being
// there (the bounds do not: it may have been deleted since), which is what
// keeps the estimates of a backfill's cursors unbiased.
type RangeQuery struct {
	Vnode       uint16
	Lo, Hi      []byte
	HiInclusive bool
}

// RowEstimate is an estimate of live rows with bounds that always contain
// the true value, as long as the ops behind the counts were consistent.
type RowEstimate struct {
	// Mean is the unbiased estimate: over many ranges its errors cancel,
	// so a sum over ranges (a backfill's vnodes in progress) must add
	// Mean. It may lie outside [Lower, Upper] by up to about a row, since
	// keeping it inside would bias it towards the middle of the bounds
	// where the truth sits at one of them.
	Mean float64
	// Rows is Mean within [Lower, Upper]: the better estimate of one
	// range on its own.
	Rows float64
	// Lower and Upper bound the true value.
	Lower, Upper int64
}

// ScanRange is one part of a Live.Partition: the rows from (StartVnode,
// StartPK) inclusive to (EndVnode, EndPK) exclusive, in (vnode, pk) order.
// A nil StartPK is the start of StartVnode; a nil EndPK is the end of
// EndVnode. The pks are the caller's to keep or change.
type ScanRange struct {
	StartVnode uint16
	StartPK    []byte
	EndVnode   uint16
	EndPK      []byte
	// Rows is the exact number of live rows in the range.
	Rows int64
}
