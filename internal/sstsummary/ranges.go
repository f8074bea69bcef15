package sstsummary

import (
	"bytes"

	"github.com/lsmstats/lsmstats/internal/pkpos"
)

// Estimate is an estimated count with bounds that always hold:
// Lo <= true value <= Hi and Lo <= Est <= Hi. The zero value is an exact 0.
type Estimate struct {
	Est    float64
	Lo, Hi uint64
}

// RangeCounts are physical counts of MVCC entries with pk in a range of one
// vnode: of one SST (VnodeSummary.CountRange), or summed over the live SSTs
// (ssttracker.CountRange). The zero value is an empty range.
type RangeCounts struct {
	Entries  Estimate
	Puts     Estimate
	Deletes  Estimate
	HeadPuts Estimate
	Prefixes Estimate
	// Files is the number of live files holding the vnode (0 for one
	// SST's counts).
	Files int
}

// Add adds the counts of o, another SST's of the same range, to rc:
// Entries become the sum of Puts and Deletes, whose bounds are at least as
// tight as the sum of the Entries' bounds.
func (rc *RangeCounts) Add(o RangeCounts) {
	for f := range numFields {
		e, oe := rc.field(f), o.field(f)
		e.Lo += oe.Lo
		e.Hi += oe.Hi
		e.Est += oe.Est
	}
	rc.Entries = Estimate{
		Est: rc.Puts.Est + rc.Deletes.Est,
		Lo:  rc.Puts.Lo + rc.Deletes.Lo,
		Hi:  rc.Puts.Hi + rc.Deletes.Hi,
	}
}

// CountRange returns the counts of vs's MVCC entries with lo <= pk < hi
// (nil: unbounded). Each count comes with bounds that always contain the
// true value (see the collector's error bound) and a linear interpolation
// between the samples around each end.
func (vs *VnodeSummary) CountRange(lo, hi []byte) RangeCounts {
	var rc RangeCounts
	if lo != nil && hi != nil && bytes.Compare(lo, hi) >= 0 {
		return rc
	}
	var clo, chi cumBounds
	if lo != nil {
		clo = cumAt(vs, lo)
	}
	if hi != nil {
		chi = cumAt(vs, hi)
	} else {
		chi = exactCum(totalCum(vs))
	}
	for f := range numFields {
		lower := sat(chi.lo[f], clo.hi[f])
		upper := chi.hi[f] - clo.lo[f]
		est := min(max(chi.est[f]-clo.est[f], float64(lower)), float64(upper))
		*rc.field(f) = Estimate{Est: est, Lo: lower, Hi: upper}
	}
	rc.Entries = Estimate{
		Est: rc.Puts.Est + rc.Deletes.Est,
		Lo:  rc.Puts.Lo + rc.Deletes.Lo,
		Hi:  rc.Puts.Hi + rc.Deletes.Hi,
	}
	return rc
}

const (
	fPuts = iota
	fDeletes
	fHeadPuts
	fPrefixes
	numFields
)

func (rc *RangeCounts) field(f int) *Estimate {
	switch f {
	case fPuts:
		return &rc.Puts
	case fDeletes:
		return &rc.Deletes
	case fHeadPuts:
		return &rc.HeadPuts
	default:
		return &rc.Prefixes
	}
}

func sat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

type cum [numFields]uint64

// cumBounds brackets the cumulative counts of entries with pk < x.
type cumBounds struct {
	lo, hi cum
	est    [numFields]float64
}

func sampleCum(s *Sample) cum { return cum{s.Puts, s.Deletes, s.HeadPuts, s.Prefixes} }

func totalCum(vs *VnodeSummary) cum {
	c := &vs.Counts
	return cum{c.Puts, c.Deletes, c.HeadPuts, c.Prefixes}
}

func exactCum(c cum) cumBounds {
	b := cumBounds{lo: c, hi: c}
	for f := range numFields {
		b.est[f] = float64(c[f])
	}
	return b
}

// cumAt brackets the counts of vs's entries with pk < x. It walks the
// packed samples (at most maxPayloadVnodeSamples) to the first one above x.
func cumAt(vs *VnodeSummary, x []byte) cumBounds {
	it := vs.samples.iter()
	var below, above Sample
	haveBelow, haveAbove := false, false
	for it.next() {
		if bytes.Compare(it.cur.PK, x) > 0 {
			above, haveAbove = it.cur, true
			break
		}
		below, haveBelow = it.cur, true
	}
	switch {
	case !haveBelow:
		return cumBounds{} // before the first pk (or no entries)
	case bytes.Equal(below.PK, x):
		return exactCum(sampleCum(&below))
	case !haveAbove && bytes.Compare(x, vs.LastPK) > 0:
		return exactCum(totalCum(vs))
	}
	b := cumBounds{lo: sampleCum(&below)}
	var nextPK []byte
	if haveAbove {
		b.hi = sampleCum(&above)
		if b.hi[fPrefixes] == b.lo[fPrefixes]+1 {
			// The gap holds one prefix, the sampled one, and it sorts
			// before x: exact.
			return exactCum(b.hi)
		}
		nextPK = above.PK
	} else {
		b.hi = totalCum(vs)
		nextPK = vs.LastPK
		// x <= LastPK: the last prefix does not sort before x.
		b.hi[fPrefixes]--
	}
	// The sampled prefix itself sorts before x.
	b.lo[fPrefixes] = min(b.lo[fPrefixes]+1, b.hi[fPrefixes])
	frac := pkpos.Interpolate(below.PK, x, nextPK)
	for f := range numFields {
		b.est[f] = float64(b.lo[f]) + frac*float64(b.hi[f]-b.lo[f])
	}
	return b
}
