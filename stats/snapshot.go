package stats

import "github.com/RoaringBitmap/roaring/v2"

// Snapshot is one consistent view of a store's statistics: the physical
// statistics of its live SSTs and the live statistics, both as of
// CommittedEpoch (lsm.Store.Stats returns one). The zero Snapshot is empty:
// every count is zero. Safe for concurrent use.
type Snapshot struct {
	CommittedEpoch uint64
	// Physical counts what the live SSTs hold: MVCC entries, puts,
	// deletes, prefixes, Pebble tombstones.
	Physical Version
	// Live counts the live rows and their bytes, exactly, per pk bucket.
	Live Live
	// PhysicalErr, if not nil, is why the last refresh of Physical failed
	// (an I/O error reading a new SST's properties): Physical then
	// describes an earlier set of SSTs and may lag behind CommittedEpoch.
	// The live statistics are exact either way.
	PhysicalErr error
}

// SnapshotFunc returns the current Snapshot (lsm.Store.Stats is one).
// Metrics calls it once per scrape, possibly from several goroutines at
// once.
type SnapshotFunc func() Snapshot

// VnodeStats are one vnode's (or a set of vnodes') physical and live
// statistics. The zero value is a vnode without data.
type VnodeStats struct {
	Physical Counts
	Live     LiveCounts
}

// Vnode returns one vnode's statistics.
func (s Snapshot) Vnode(table uint32, vnode uint16) VnodeStats {
	return VnodeStats{Physical: s.Physical.Vnode(table, vnode), Live: s.Live.Vnode(table, vnode)}
}

// Sum returns the statistics summed over a set of vnodes.
func (s Snapshot) Sum(table uint32, vnodes *roaring.Bitmap) VnodeStats {
	return VnodeStats{Physical: s.Physical.Sum(table, vnodes), Live: s.Live.Sum(table, vnodes)}
}

// EstimateRows estimates the live rows of a vnode with pk in [lo, hi) (nil:
// unbounded), with bounds that contain the true count (Live.EstimateRows).
func (s Snapshot) EstimateRows(table uint32, vnode uint16, lo, hi []byte) RowEstimate {
	return s.Live.EstimateRows(table, vnode, lo, hi)
}

// AppendEstimates appends to dst the estimates of qs, answered together
// (Live.AppendEstimates): what a backfill's checkpoint asks, one range per
// vnode in progress.
func (s Snapshot) AppendEstimates(dst []RowEstimate, table uint32, qs []RangeQuery) []RowEstimate {
	return s.Live.AppendEstimates(dst, table, qs)
}

// Partition cuts the live rows of a set of vnodes into at most n ranges of
// about equal size (Live.Partition).
func (s Snapshot) Partition(table uint32, vnodes *roaring.Bitmap, n int) []ScanRange {
	return s.Live.Partition(table, vnodes, n)
}
