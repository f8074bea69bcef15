package livebuckets

import (
	"bytes"

	"github.com/lsmstats/lsmstats/internal/pkpos"
)

// fraction estimates where x (whose key8 is k) lies in bucket i: between
// its lower bound and the next bucket's, or the vnode's smallest and
// largest pk for the first and last buckets; 0.5 when such a hint is
// unknown. The bounds' keys decide when they are the bounds themselves
// (every bound of the vnode is at most 8 bytes), or when they differ by at
// least 2⁸: the bytes past the keys then move the fraction by less than
// 2⁻⁸ of the bucket. Else the bounds' bytes past their shared prefix are
// interpolated, which reads two bounds that a checkpoint meets cold. It
// agrees with position, which a scan uses on the bounds' bytes, to within
// 2⁻⁸ (TestFractionAgrees).
func (v *liveVnode) fraction(i int, x []byte, k uint64) float64 {
	if lo, hi, ok := v.keyFrame(i); ok {
		return keyFraction(lo, k, hi)
	}
	return v.frame(i).at(x, k)
}

// frame is how fraction measures positions in a bucket between its
// anchors: by their keys lo and hi (off 0), or by the words lo and hi of
// the 8 bytes past the first off bytes, which the anchors loPK and hiPK
// share; flat puts every row at 0.5. A row's position is linear in its
// word, so positions in two frames of one bucket are affine in each other
// (moveFrame).
type frame struct {
	off        int
	lo, hi     uint64
	loPK, hiPK []byte // the anchors, when off > 0
	flat       bool
}

func (v *liveVnode) frame(i int) frame {
	if lo, hi, ok := v.keyFrame(i); ok {
		return frame{lo: lo, hi: hi}
	}
	if i == 0 && v.minPK == nil || i+1 == len(v.keys) && v.maxPK == nil {
		return frame{flat: true}
	}
	lo, hi := v.buckets[i].lower(), v.maxPK
	if i == 0 {
		lo = v.minPK
	}
	if i+1 < len(v.keys) {
		hi = v.buckets[i+1].lower()
	}
	n := pkpos.SharedPrefix(lo, hi)
	fa, fb := pkpos.Word(lo[n:]), pkpos.Word(hi[n:])
	if fb <= fa {
		// Anchors that the words cannot tell apart: the bucket's rows
		// are its anchor (one row, whose pk is both).
		return frame{flat: true, loPK: lo, hiPK: hi}
	}
	return frame{off: n, lo: fa, hi: fb, loPK: lo, hiPK: hi}
}

// keyFrame returns the keys of bucket i's anchors if they decide its
// frame without the bounds' bytes, which a checkpoint's estimates would
// meet cold in their separate allocations: the frame's lo and hi when off
// is 0.
func (v *liveVnode) keyFrame(i int) (lo, hi uint64, ok bool) {
	kv := v.fullView()
	return kv.frame(i)
}

// frame returns the keys of bucket i's anchors in the view, if they decide
// positions in it: if they are exact or at least 2⁸ apart (the bytes past
// the keys then move a position by less than 2⁻⁸ of the bucket).
func (kv *keyView) frame(i int) (lo, hi uint64, ok bool) {
	lo = kv.keys[i]
	if i == 0 {
		if !kv.hasMin {
			return 0, 0, false
		}
		lo = kv.minKey
	}
	if i+1 < len(kv.keys) {
		hi = kv.keys[i+1]
	} else {
		if !kv.hasMax {
			return 0, 0, false
		}
		hi = kv.maxKey
	}
	return lo, hi, hi > lo && (kv.exact || hi-lo >= 1<<8)
}

// at returns the position of x (whose key8 is k) in the frame.
func (f frame) at(x []byte, k uint64) float64 {
	switch {
	case f.flat:
		return 0.5
	case f.off == 0:
		return keyFraction(f.lo, k, f.hi)
	case bytes.Compare(x, f.hiPK) >= 0:
		return 1
	case bytes.Compare(x, f.loPK) <= 0:
		return 0
	}
	return min(float64(pkpos.Word(x[f.off:])-f.lo)/float64(f.hi-f.lo), 1)
}

// moveFrame carries the calibration of bucket i, an end bucket whose
// anchor moved out to a new row, from its frame before the move (was) to
// its frame now. The bucket's rows lie between was's anchors, which share
// the bytes the new frame skips: in the new frame's words they lie where
// was's anchors map, at a·u + c for a row at u in was. With the same bytes
// measured the sums follow exactly; when the shared prefix shrank, to
// within a unit of the new frame's words (a fraction 1/(hi−lo) of the
// bucket), as fraction's own rounding. The bucket then needs no rescan.
func (v *liveVnode) moveFrame(i int, was frame) {
	v.unshare(i)
	b := &v.buckets[i]
	if !b.calibrated {
		return
	}
	a, c, ok := affine(was, v.frame(i))
	if !ok {
		b.calibrated = false
		return
	}
	// Rounded to the grid of positions: the sum moves by less than a unit
	// of it (2⁻¹⁷ of the bucket).
	b.sumPos = quantize(a*b.sumPos + float64(max(b.Rows, 0))*c)
}

// affine returns a and c such that a row at position u in frame was lies
// at a·u + c in frame now, whose anchors enclose was's; ok is false when
// the two frames do not measure comparable bytes. was's anchors are
// expressed in now's words: exactly when both measure the same bytes, and
// to within a unit of now's words when now's shared prefix is shorter.
func affine(was, now frame) (a, c float64, ok bool) {
	var lo, hi uint64
	switch {
	case was.flat && !now.flat && was.loPK != nil && bytes.Equal(was.loPK, was.hiPK):
		// Every row of was is its anchor: in now, at the anchor's position.
		return 0, now.at(was.loPK, key8(was.loPK)), true
	case was.flat || now.flat:
		return 0, 0, false
	case now.off == 0 && was.off == 0:
		lo, hi = was.lo, was.hi
	case now.off == 0:
		lo, hi = key8(was.loPK), key8(was.hiPK)
	case was.off > 0 && now.off <= len(was.loPK) && now.off <= len(was.hiPK):
		lo, hi = pkpos.Word(was.loPK[now.off:]), pkpos.Word(was.hiPK[now.off:])
	default:
		// Measured by their keys before, by bytes past a shared prefix now
		// (the bounds were all short): rare, and rescanned.
		return 0, 0, false
	}
	if now.lo > lo || lo > hi || hi > now.hi {
		return 0, 0, false
	}
	span := float64(now.hi - now.lo)
	return float64(hi-lo) / span, float64(lo-now.lo) / span, true
}

func keyFraction(loKey, k, hiKey uint64) float64 {
	switch {
	case k <= loKey:
		return 0
	case k >= hiKey:
		return 1
	}
	return float64(k-loKey) / float64(hiKey-loKey)
}

// position is fraction on bytes alone: where x lies between the anchors lo
// and hi of a bucket, as a scan of its rows sees it.
func position(lo, x, hi []byte) float64 {
	loKey, hiKey := key8(lo), key8(hi)
	if hiKey > loKey && (len(lo) <= 8 && len(hi) <= 8 || hiKey-loKey >= 1<<8) {
		return keyFraction(loKey, key8(x), hiKey)
	}
	return pkpos.Interpolate(lo, x, hi)
}
