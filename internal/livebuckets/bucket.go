package livebuckets

import (
	"math"
	"unsafe"
)

const (
	// SplitDivisor sets the largest bucket to 1/SplitDivisor of its vnode.
	SplitDivisor = 64
	// MaxSplitDivisor and TableTargetBuckets let a vnode of a table of few
	// vnodes split finer than 1/SplitDivisor, down to 1/MaxSplitDivisor of
	// itself, until its table has about TableTargetBuckets buckets (what a
	// table of 256 equal vnodes has at SplitDivisor). An estimate's error
	// counts against its table: a vnode's error averages out over many
	// vnodes, not over one or four.
	MaxSplitDivisor    = 256
	TableTargetBuckets = 256 * SplitDivisor
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
	// sumPos is the sum of the positions of the bucket's rows between its
	// anchors, each rounded to a multiple of 1/posUnit (quantize), so that
	// the sum is exact in a float64 and a commit's change of it is an
	// integer number of units (the delta log, meta.go). See calibrated.
	sumPos float64
	// lowerPtr and lowerLen are the bucket's lower bound (lower), nil for
	// the first bucket: a slice's pointer and length without its capacity,
	// which with the two flags below make the bucket 40 bytes rather than
	// 56 (a vnode holds one to two hundred of them; see design.md, "What
	// the statistics hold in memory"). A pk fits in 32 bits of length, as
	// Pebble's batches encode a key's length in 32 bits.
	lowerPtr *byte
	lowerLen uint32
	// lowerLive says that lower is the pk of a live row (always false for
	// the first bucket, whose smallest pk is the vnode's minPK hint).
	lowerLive bool
	// calibrated says that sumPos holds, for the bucket's current rows,
	// the sum of their positions between the bucket's anchors. With the
	// ranks of its n rows 1 to n, the sum of rank − n·position over them
	// is then n(n+1)/2 − n·sumPos (sumResid), whose mean over the rows
	// that are not anchors is the bucket's calibration offset (offset). A
	// scan of the rows sets it; every insert and delete after it updates it
	// exactly, as its change depends on the position of the row alone; a
	// merge or an end bucket's anchor moving carries it into the new frame.
	// Without it (no scan yet, a merge or a move whose frames do not
	// compare) the bucket is rescanned after the commit, and estimates use
	// the uniform model until then.
	calibrated bool
}

// posUnit is the resolution of a row's position in a bucket's sumPos:
// 2⁻¹⁶ of the bucket, which moves an estimate by at most 2⁻¹⁷ of the
// bucket's rows per row, up or down alike.
const posUnit = 1 << 16

// quantize rounds a position to a multiple of 1/posUnit.
func quantize(u float64) float64 { return math.Round(u*posUnit) / posUnit }

// posUnits returns a quantized position or sum of them in units of
// 1/posUnit.
func posUnits(u float64) int64 { return int64(math.Round(u * posUnit)) }

// same reports whether b and o are equal, bounds and all (the same
// slice): b == o, field by field inline, where == on the struct calls a
// function per bucket.
func (b *bucket) same(o *bucket) bool {
	return b.Counts == o.Counts && b.sumPos == o.sumPos && b.lowerPtr == o.lowerPtr && b.lowerLen == o.lowerLen &&
		b.lowerLive == o.lowerLive && b.calibrated == o.calibrated
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
	return (b.sumResid() - float64(b2i(loLive))) / float64(m), true
}

// sumResid is the sum of rank − n·position over the bucket's rows: the
// ranks 1 to n sum to n(n+1)/2.
func (b *bucket) sumResid() float64 {
	n := float64(max(b.Rows, 0))
	return n*(n+1)/2 - n*b.sumPos
}

// insert updates the calibration for a row inserted at position u: every
// row keeps its position, and the new one adds its own. (The residuals'
// sum, n(n+1)/2 − n·sumPos, follows: the rows above the new one rank one
// higher, and every row's n·position grows by its position.)
func (b *bucket) insert(u float64) { b.sumPos += quantize(u) }

// remove updates the calibration for a row at position u deleted from
// the bucket: the inverse of insert.
func (b *bucket) remove(u float64) { b.sumPos -= quantize(u) }

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
	b.calibrated, b.sumPos = p.Calibrated, p.SumPos
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
// of the vnode, or less in a table of few vnodes (down to 1/MaxSplitDivisor
// of the vnode, or 1/TableTargetBuckets of the table), 1/budget of its table
// (TableBucketBudget when budget is not positive), and at least
// MinSplitRows.
func splitLimit(vnodeRows, tableRows, budget int64) int64 {
	if budget <= 0 {
		budget = TableBucketBudget
	}
	ceil := func(a, b int64) int64 { return (a + b - 1) / b }
	fine := max(ceil(vnodeRows, MaxSplitDivisor), ceil(tableRows, TableTargetBuckets))
	return max(MinSplitRows, min(ceil(vnodeRows, SplitDivisor), fine), ceil(tableRows, budget))
}
