package livebuckets

import "unsafe"

const (
	// SplitDivisor sets the largest bucket to 1/SplitDivisor of its vnode.
	SplitDivisor = 96
	// MinSplitRows is the split limit of the smallest vnodes: at one row a
	// bucket, a vnode of up to SplitDivisor rows is counted exactly.
	MinSplitRows = 1
	// TableBucketBudget bounds the buckets of one table: a bucket may hold
	// at least 1/TableBucketBudget of its table's rows, so a table of many
	// small vnodes keeps about TableBucketBudget buckets (16 bytes of index
	// and 48 of bucket, plus its bound, each), not one per row.
	TableBucketBudget = 1 << 16
)

// Counts are live rows and live bytes (pk + row bytes of each live row).
type Counts struct {
	Rows  int64
	Bytes int64
}

// Add returns c + o.
func (c Counts) Add(o Counts) Counts {
	return Counts{Rows: c.Rows + o.Rows, Bytes: c.Bytes + o.Bytes}
}

type bucket struct {
	Counts
	sumResid, sumPos float64 // see calibrated
	// lowerPtr and lowerLen are the bucket's lower bound (lower), nil for
	// the first bucket: a slice's pointer and length without its capacity,
	// which with the two flags below make the bucket 48 bytes rather than
	// 64 (a vnode holds one to two hundred of them; see design.md, "What
	// the statistics hold in memory"). A pk fits in 32 bits of length, as
	// Pebble's batches encode a key's length in 32 bits.
	lowerPtr *byte
	lowerLen uint32
	// lowerLive says that lower is the pk of a live row (always false for
	// the first bucket, whose smallest pk is the vnode's minPK hint).
	lowerLive bool
	// calibrated says that sumResid and sumPos hold, for the bucket's
	// current rows, the sums of rank − n·position and of position, where
	// rank counts the bucket's rows at or below a row, n is its rows and
	// position is where the row lies between the bucket's anchors (see
	// calibrate). A scan of the rows sets them; every insert and delete
	// after it updates them exactly, as their change depends on the
	// position of the row alone; a merge or an end bucket's anchor moving
	// carries them into the new frame. Without them (no scan yet, a merge
	// or a move whose frames do not compare) the bucket is rescanned after
	// the commit, and estimates use the uniform model until then.
	calibrated bool
}

// lower returns the bucket's lower bound (nil for the first bucket).
func (b *bucket) lower() []byte { return unsafe.Slice(b.lowerPtr, b.lowerLen) }

// setLower sets the bucket's lower bound to pk, which it aliases.
func (b *bucket) setLower(pk []byte) { b.lowerPtr, b.lowerLen = unsafe.SliceData(pk), uint32(len(pk)) }

// offset returns the calibration offset of a bucket's estimates: the mean
// of rank − n·position over its rows that are not anchors (the live lower
// bound has rank 1 at position 0, the last bucket's live maxPK rank n at
// position 1: residuals 1 and 0). loLive and hiLive say whether the
// anchors are live rows of the bucket.
func (b *bucket) offset(loLive, hiLive bool) (float64, bool) {
	m := b.Rows - b2i(loLive) - b2i(hiLive)
	if !b.calibrated || m <= 0 {
		return 0, false
	}
	return (b.sumResid - float64(b2i(loLive))) / float64(m), true
}

// insert updates the calibration for a row inserted at position u. With n
// rows before it and U the sum of their positions, the rows above the new
// one rank one higher and every row's n·position grows by its position, so
// the residuals change by n − U in all; the new row's own residual is its
// rank minus (n+1)·u, and its rank plus the rows above it is n+1: the sum
// of residuals grows by n − U + 1 − (n+1)·u, whichever rows are above it.
func (b *bucket) insert(u float64) {
	n := float64(max(b.Rows, 0))
	b.sumResid += n - b.sumPos + 1 - (n+1)*u
	b.sumPos += u
}

// remove updates the calibration for a row at position u deleted from
// the bucket: the inverse of insert.
func (b *bucket) remove(u float64) {
	n := float64(max(b.Rows, 1))
	b.sumPos -= u
	b.sumResid -= (n - 1) - b.sumPos + 1 - n*u
}

// stale reports whether the bucket must be rescanned to be calibrated
// again: it has rows but no calibration.
func (b *bucket) stale() bool { return b.Rows > 0 && !b.calibrated }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// calibrate takes the calibration of a scanned piece of the bucket's rows.
func (b *bucket) calibrate(p Piece) {
	b.calibrated, b.sumResid, b.sumPos = p.Calibrated, p.SumResid, p.SumPos
}

// merge adds the rows of o, the next bucket, to b. The merged bucket spans
// both, so its rows sit elsewhere between its anchors than the calibration
// of either measured: it is uncalibrated until Normalize carries the parts'
// calibrations into its frame (mergeCalibration), or rescanned.
func (b *bucket) merge(o bucket) {
	b.Counts = b.Add(o.Counts)
	b.calibrate(Piece{})
}

// splitLimit is the most rows a bucket of a vnode may hold: 1/SplitDivisor
// of the vnode, 1/budget of its table (TableBucketBudget when budget is not
// positive), and at least MinSplitRows.
func splitLimit(vnodeRows, tableRows, budget int64) int64 {
	if budget <= 0 {
		budget = TableBucketBudget
	}
	return max(MinSplitRows, (vnodeRows+SplitDivisor-1)/SplitDivisor, (tableRows+budget-1)/budget)
}
