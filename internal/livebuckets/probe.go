package livebuckets

import (
	"bytes"
	"sort"
)

// probe finds the bucket of a vnode that holds x: the last whose lower
// bound is at most x. It searches the keys for the last one at most
// key8(x), then tells apart by their bytes the buckets whose key equals
// x's.
type probe struct {
	v  *liveVnode
	kv *keyView // the vnode's query view
	x  []byte
	// k and xl are the key and length class of x past kv.skip bytes.
	k  uint64
	xl int
	// out is -1 or +1 for an x below or above every pk of the vnode (it
	// lacks the bytes that kv skips), located in the first or last
	// bucket without a search.
	out int
	// through counts x itself (an inclusive end: a cursor).
	through bool
	// i and n bracket the search: the last key at most k is among
	// keys[i : i+n]. Once located, i is the bucket holding x.
	i, n int
	// before, rows and aux are the rows before bucket i, in it, and its
	// aux, once located.
	before, rows int64
	aux          uint64
}

// start begins the search for x in v; nil x is minus infinity, in bucket
// 0 (keys[0] is 0, at most any k).
func (p *probe) start(v *liveVnode, kv *keyView, x []byte, through bool) {
	if x == nil {
		// Nothing to search or read (a consumed-rows query's Lo): the
		// vnode's index stays untouched.
		*p = probe{v: v, kv: kv, n: 1}
		return
	}
	*p = probe{v: v, kv: kv, x: x, n: len(kv.keys), through: through}
	if kv.skip == 0 {
		p.k, p.xl = key8(x), lenClass(x)
		return
	}
	skip := int(kv.skip)
	switch c := bytes.Compare(x[:min(len(x), skip)], kv.prefix); {
	case c == 0 && len(x) >= skip:
		p.k, p.xl = key8(x[skip:]), lenClass(x[skip:])
	case c <= 0:
		p.out, p.n = -1, 1
	default:
		p.out, p.i, p.n = 1, p.n-1, 1
	}
}

// guessWindow is the number of keys around a guess that a probe checks.
const guessWindow = 16

// guess narrows the search to the guessWindow keys around where k lies
// between the vnode's smallest and largest pk, if the keys at the window's
// ends bracket k. Buckets hold about equal rows, so their bounds are
// quantiles of the vnode's pks, and for pks spread evenly over their keys
// (integer ids, hashes, timestamps) the guess is within a few buckets and
// nearly every guess hits. A miss costs the two loads and leaves the binary
// search as it was.
func (p *probe) guess() {
	kv := p.kv
	if p.n <= guessWindow || !kv.hasMin || !kv.hasMax || kv.maxKey <= kv.minKey {
		return
	}
	n := p.n
	g := n - 1
	if p.k < kv.maxKey {
		g = int(float64(p.k-min(p.k, kv.minKey)) / float64(kv.maxKey-kv.minKey) * float64(n))
	}
	a, b := max(g-guessWindow/2, 0), min(g+guessWindow/2, n)
	if (a == 0 || kv.keys[a] <= p.k) && (b == n || kv.keys[b] > p.k) {
		p.i, p.n = a, b-a
	}
}

// step halves the search, and reports whether it needs more steps. The
// key comparison picks the half without a branch, so a probe's next load
// waits for nothing but this one.
func (p *probe) step() bool {
	if p.n <= 1 {
		return false
	}
	half := p.n / 2
	i := p.i
	if p.kv.keys[i+half] <= p.k {
		i += half
	}
	p.i, p.n = i, p.n-half
	return p.n > 1
}

// bucket returns the index of the bucket holding x once the search is
// done: of the buckets whose key equals k, the last whose lower bound is at
// most x. Such a run of buckets is long where many pks share their first 8
// bytes (a hot value of a pk's first column), so it is searched in halves
// too: by keys for its start, by bytes within it.
func (p *probe) bucket() int {
	i, keys := p.i, p.kv.keys
	if i == 0 || keys[i] != p.k {
		return i
	}
	if keys[i-1] != p.k {
		// A run of one, the common case: x's bucket or the one before,
		// which the bound's length tells apart unless both it and x are
		// longer than 8 bytes.
		c, ok := compareByKey(p.k, p.xl, keys[i], p.v.boundLen(i, int(p.kv.skip)))
		if !ok {
			c = bytes.Compare(p.x, p.v.buckets[i].lower())
		}
		if c >= 0 {
			return i
		}
		return i - 1
	}
	run := sort.Search(i, func(j int) bool { return keys[j] == p.k })
	return run - 1 + sort.Search(i+1-run, func(j int) bool {
		return bytes.Compare(p.v.buckets[run+j].lower(), p.x) > 0
	})
}

// locate ends the search: i becomes the bucket holding x, and before, rows
// and aux are read.
func (p *probe) locate() {
	if p.x == nil {
		return // minus infinity: no rows before bucket 0
	}
	if p.out == 0 {
		p.i = p.bucket()
	}
	p.before, p.rows, p.aux = p.v.rows(p.i)
}

// cumBound brackets the live rows below x (at or below x for an inclusive
// end), with an unbiased estimate, which may lie outside the bounds by up
// to about a row.
type cumBound struct {
	lower, upper int64
	est          float64
}

func exactBound(n int64) cumBound { return cumBound{lower: n, upper: n, est: float64(n)} }

// cumulative brackets the live rows below x (at or below x for an
// inclusive end), once the probe is located; nil x is minus infinity.
//
// The rows of the buckets before x's bucket are exact. Within the bucket,
// the rows at its two anchors are known: its lower bound (or the vnode's
// minPK for the first bucket) holds a live row if lowerLive (minLive), and
// the last bucket's upper anchor, maxPK, if maxLive. An end point at an
// anchor, or in a bucket with no rows between its anchors, is therefore
// counted exactly. Otherwise the n rows of the bucket are placed by
// interpolation: n·position(x) + offset, where offset is the bucket's
// calibration (the mean, over its rows when it was last scanned, of the
// rows at or below each row minus n·position(row)), so that over cursors
// at its rows the estimate is unbiased whatever the keys' shape (see
// package stats). An exclusive end takes half a row less: a point between
// two rows is, on average, half a row past the earlier one.
func (p *probe) cumulative() cumBound {
	if p.x == nil {
		return cumBound{}
	}
	v, i, before, n := p.v, p.i, p.before, max(p.rows, 0)
	switch p.out {
	case -1:
		return exactBound(before) // below minPK
	case 1:
		return exactBound(before + n) // above maxPK
	}
	var loLive bool
	if i == 0 {
		if p.kv.hasMin {
			switch c := p.compareAnchor(v.minPK, p.kv.minKey); {
			case c < 0:
				return exactBound(before) // no live row is below minPK
			case c == 0:
				return exactBound(before + b2i(p.through && v.minLive))
			}
		}
		loLive = v.minLive
	} else {
		if p.kv.keys[i] == p.k {
			c, ok := compareByKey(p.k, p.xl, p.k, auxLen(p.aux))
			if c == 0 && (ok || bytes.Equal(v.buckets[i].lower(), p.x)) {
				return exactBound(before + b2i(p.through && p.aux&auxLowerLive != 0))
			}
		}
		loLive = p.aux&auxLowerLive != 0
	}
	var hiLive bool
	if i == len(p.kv.keys)-1 && p.kv.hasMax {
		switch c := p.compareAnchor(v.maxPK, p.kv.maxKey); {
		case c > 0 || c == 0 && p.through:
			return exactBound(before + n) // no live row is above maxPK
		case c == 0:
			return exactBound(before + n - min(n, b2i(v.maxLive)))
		}
		hiLive = v.maxLive
	}
	lower := before + min(n, b2i(loLive))
	upper := max(lower, before+n-b2i(hiLive))
	if upper == lower {
		return exactBound(lower) // no row between the anchors
	}
	offset := 0.5 * float64(1+b2i(loLive)-b2i(hiLive)) // the uniform model's
	if p.aux&auxCalibrated != 0 {
		offset = auxOffset(p.aux)
	}
	if !p.through {
		offset -= 0.5
	}
	return cumBound{lower: lower, upper: upper, est: float64(before) + float64(n)*p.fraction() + offset}
}

// compareAnchor compares x with an anchor of the vnode whose key in the
// query view is ak, reading the anchor's bytes only when keys and lengths
// do not decide.
func (p *probe) compareAnchor(anchor []byte, ak uint64) int {
	if c, ok := compareByKey(p.k, p.xl, ak, lenClass(anchor[int(p.kv.skip):])); ok {
		return c
	}
	return bytes.Compare(p.x, anchor)
}

// fraction is liveVnode.fraction of x in its bucket, by the query view's
// keys where they decide.
func (p *probe) fraction() float64 {
	if lo, hi, ok := p.kv.frame(p.i); ok {
		return keyFraction(lo, p.k, hi)
	}
	return p.v.frame(p.i).at(p.x, key8(p.x))
}
