package livebuckets

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/lsmstats/lsmstats/internal/pkpos"
)

// aux packs the per-bucket facts a query reads into the low auxBits of
// the bucket's prefix sum (liveVnode.cum): the flags, the length class of
// the lower bound past the query view's skip bytes (lenClass), and the calibration offset as a signed
// fixed-point number of sixteenths of a row, held within ±2¹³ rows.
func (v *liveVnode) aux(i, skip int) uint64 {
	b := &v.buckets[i]
	var a uint64
	if i > 0 {
		a = uint64(lenClass(b.lower()[skip:])) << auxLenShift
	}
	if b.lowerLive {
		a |= auxLowerLive
	}
	loLive, hiLive := b.lowerLive, false
	if i == 0 {
		loLive = v.minLive
	}
	if i == len(v.buckets)-1 {
		hiLive = v.maxLive
	}
	if off, ok := b.offset(loLive, hiLive); ok {
		q := int64(math.Round(off * auxOffsetUnit))
		q = min(max(q, -1<<(auxOffsetBits-1)), 1<<(auxOffsetBits-1)-1)
		a |= auxCalibrated | uint64(q)&(1<<auxOffsetBits-1)<<auxOffsetShift
	}
	return a
}

// auxOffset returns the calibration offset in an aux, in rows.
func auxOffset(a uint64) float64 {
	off := int64(a<<(64-auxBits)) >> (64 - auxOffsetBits) // sign-extended
	return float64(off) / auxOffsetUnit
}

// auxLen returns the length class of the lower bound in an aux.
func auxLen(a uint64) int { return int(a>>auxLenShift) & (1<<auxLenBits - 1) }

const (
	auxLowerLive  = 1 << 0
	auxCalibrated = 1 << 1
	// auxBits are the low bits of each prefix sum that hold its bucket's
	// aux: two flags, the lower bound's length class in auxLenBits, and
	// the offset's auxOffsetBits. The rest of the word, 40 bits, holds the
	// prefix sum.
	auxLenShift    = 2
	auxLenBits     = 4
	auxOffsetShift = auxLenShift + auxLenBits
	auxOffsetBits  = 18
	auxBits        = auxOffsetShift + auxOffsetBits
	auxOffsetUnit  = 16
	auxMask        = 1<<auxBits - 1
)

// lenClass is how much of a pk's length the comparisons by key8 need: its
// length up to 8, or 9 for any longer pk.
func lenClass(b []byte) int { return min(len(b), 9) }

// compareByKey compares two pks by their key8 (xk, yk) and length classes
// (xl, yl) alone, and reports whether those decide. Equal keys leave only
// the bytes past the first 8 and the zero padding of shorter pks: a pk of
// at most 8 bytes is then a prefix of the other, so the shorter is the
// smaller, unless both are longer than 8 bytes.
func compareByKey(xk uint64, xl int, yk uint64, yl int) (c int, ok bool) {
	if xk != yk {
		return cmp.Compare(xk, yk), true
	}
	if xl > 8 && yl > 8 {
		return 0, false
	}
	return cmp.Compare(xl, yl), true
}

// key8 returns b's first 8 bytes as a big-endian integer, zero-padded. When
// key8(a) != key8(b) their order is that of a and b: they differ within
// their first 8 bytes, or one is a prefix of the other there.
func key8(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var k uint64
	for i, c := range b {
		k |= uint64(c) << (56 - 8*i)
	}
	return k
}

// liveVnode holds the buckets of one vnode, and an index that queries read
// instead of them: the 8-byte keys of the buckets' lower bounds and the
// prefix sums of their rows, in one allocation. A query guesses its bucket
// from where its key lies between the vnode's smallest and largest pk,
// checks the guess against two keys, and reads the prefix sums next to
// them: a few cache lines on one or two pages, and no bound's bytes unless
// the query's pk shares its first 8 bytes with one. The estimates of a
// checkpoint meet this index cold (the commit before it published fresh
// copies of every vnode it touched, and other work evicted them): a binary
// search of the buckets themselves, a sum of their rows and the bytes of
// two separately allocated bounds would each be cache misses more per vnode
// (BenchmarkConsumedCold4096 measures the index as it is).
type liveVnode struct {
	// q is how queries order and place pks by their keys (see keyView):
	// set when the vnode is sealed, or, while a store loads, as the
	// vnode's own keys. The fields a query reads come first, to share
	// cache lines.
	q keyView
	// minLive and maxLive say whether minPK and maxPK are the pks of live
	// rows: a delete clears them, so they are exact, like each bucket's
	// lowerLive.
	minLive, maxLive bool
	// cum[i] is the live rows of the buckets before bucket i, for i up to
	// len(buckets), shifted left by auxBits, with bucket i's aux in the
	// low bits (int64 bits: unchecked writers may leave counts negative):
	// a query reads both from one word. seal puts it in one allocation with
	// the query keys when a batch publishes the vnode. Nil while the vnode
	// is being changed or loaded.
	cum []uint64
	// minPK and maxPK bound the vnode's pks: no live row is below minPK or
	// above maxPK. They are the anchors of the first and last bucket's
	// interpolation. Inserts below or above them move them; a scan of the
	// first or last bucket (a split, a recount) sets them to the smallest
	// and largest live pk.
	minPK, maxPK []byte
	// keys[i] is key8(buckets[i].lower). It follows every change of the
	// buckets' bounds (setBuckets). A batch's copy of the vnode shares it
	// until its bounds change or it is sealed, so it is never written in
	// place.
	keys []uint64
	// minKey and maxKey are key8 of minPK and maxPK.
	minKey, maxKey uint64
	// shortBounds and shortHints say that every lower bound, and both pk
	// hints, are at most 8 bytes: their keys are exact.
	shortBounds, shortHints bool
	total                   Counts
	buckets                 []bucket // sorted by lower; buckets[0].lower == nil
	// arena is the allocation the vnode was published in, nil for a
	// batch's private copy.
	arena *arena
	// base is the epoch of the vnode's bucket rows (persist.go): the log
	// rows of later epochs hold what commits changed since.
	base uint64
	// shared, in a batch's copy of a vnode, is how many of its first
	// buckets are known to be those of sharedWith, the vnode it was copied
	// from, untouched: the copy starts with all of them, and every change
	// of a bucket lowers it to that bucket's index (unshare). The log
	// section and the sealed index start after them, without comparing the
	// buckets (sharedBuckets). 0 and nil anywhere else.
	shared     int
	sharedWith *liveVnode
}

// sharedBuckets returns how many of v's first buckets are old's: v.shared
// if v is a batch's copy of old, else by comparing them.
func (v *liveVnode) sharedBuckets(old *liveVnode) int {
	if v.sharedWith == old {
		return min(v.shared, len(old.buckets))
	}
	return sameBuckets(old.buckets, v.buckets)
}

// unshare records that bucket i of a batch's copy of a vnode changes, and
// with it, for all the code knows, those after it.
func (v *liveVnode) unshare(i int) { v.shared = min(v.shared, i) }

// keyView is how queries order and place pks in a sealed vnode by 8-byte
// keys: the keys of the bucket bounds and of the anchors taken past skip
// bytes that all of them, and so every pk of the vnode, share. Where pks
// share a long prefix (a tenant, a path, a hot first column) the keys of
// the whole bounds are all equal and tell nothing, and every step of a
// query would read bounds' bytes; past the shared prefix, the keys decide
// again. skip is 0 unless the anchors share at least 8 bytes, and the
// view is then the vnode's own keys.
type keyView struct {
	keys           []uint64 // keys[i] of bucket i's lower bound; keys[0] is 0
	minKey, maxKey uint64   // of minPK and maxPK
	skip           int32
	// prefix is the skip bytes every pk of the vnode starts with, which a
	// query compares its pk with first. pack lays the prefixes of a
	// publish out together and shares one among neighbouring vnodes with
	// equal prefixes, so that the comparison meets them warm: a vnode's
	// own minPK is an allocation of its own, one more cold load per query.
	prefix []byte
	// exact says that every bound and both anchors are at most 8 bytes
	// past skip: their keys are exact.
	exact bool
	// hasMin and hasMax say that the vnode has its pk hints.
	hasMin, hasMax bool
}

// fullView is the view of the vnode's own keys (skip 0).
func (v *liveVnode) fullView() keyView {
	return keyView{
		keys: v.keys, minKey: v.minKey, maxKey: v.maxKey, exact: v.shortBounds && v.shortHints,
		hasMin: v.minPK != nil, hasMax: v.maxPK != nil,
	}
}

// querySkip returns the bytes that the vnode's anchors and every bucket
// bound share, if at least 8, else 0.
func (v *liveVnode) querySkip() int {
	if v.minPK == nil || v.maxPK == nil {
		return 0
	}
	n := pkpos.SharedPrefix(v.minPK, v.maxPK)
	for _, b := range v.buckets[1:] {
		if n < 8 {
			break
		}
		n = min(n, pkpos.SharedPrefix(b.lower(), v.minPK))
	}
	if n < 8 {
		return 0
	}
	return n
}

func newLiveVnode() *liveVnode {
	return &liveVnode{buckets: []bucket{{}}, keys: []uint64{0}, shortBounds: true, shortHints: true}
}

// setBuckets replaces the buckets, whose bounds changed, and their keys.
func (v *liveVnode) setBuckets(bs []bucket) {
	keys := make([]uint64, len(bs))
	short := true
	for i, b := range bs {
		keys[i] = key8(b.lower())
		short = short && len(b.lower()) <= 8
	}
	v.buckets, v.keys, v.cum, v.shortBounds = bs, keys, nil, short
}

// replaceBucket replaces bucket i of a batch's copy of a vnode by repl,
// whose first bucket has bucket i's lower bound. Replacing the last bucket
// (a vnode growing at its end) appends to the buckets in place and copies
// only the keys, which the published vnode shares.
func (v *liveVnode) replaceBucket(i int, repl []bucket) {
	v.unshare(i)
	switch {
	case len(repl) == 1:
		v.buckets[i] = repl[0] // the bounds are the same
	case i == len(v.buckets)-1:
		keys := slices.Clip(v.keys[:i+1])
		short := v.shortBounds
		for _, b := range repl[1:] {
			keys = append(keys, key8(b.lower()))
			short = short && len(b.lower()) <= 8
		}
		v.buckets = append(v.buckets[:i], repl...)
		v.keys, v.cum, v.shortBounds = keys, nil, short
	default:
		v.setBuckets(slices.Concat(v.buckets[:i], repl, v.buckets[i+1:]))
	}
}

// appendBucket appends a bucket above every other, for loading.
func (v *liveVnode) appendBucket(b bucket) {
	v.buckets, v.keys, v.cum = append(v.buckets, b), append(v.keys, key8(b.lower())), nil
	v.shortBounds = v.shortBounds && len(b.lower()) <= 8
}

// seal builds the index of a vnode about to be published: a copy of its
// keys and the prefix sums of its rows with each bucket's aux, in one
// allocation.
func (v *liveVnode) seal() {
	v.sealInto(make([]uint64, 2*len(v.buckets)+1), nil, 0)
}

// sealInto builds the index of v in index. was, if not nil, is a sealed
// vnode that v may share buckets with (the copy the batch made v from):
// the prefix sums and aux of the buckets they share before the first that
// differs are copied from its index, since each depends only on the
// buckets before it and on its own. A commit of the interleaved order
// touches every vnode with a few rows at its end, and then seals only
// those. same, if not negative, is how many of v's first buckets are
// was's (liveVnode.shared, which the batch's log section relied on too).
func (v *liveVnode) sealInto(index []uint64, was *liveVnode, same int) {
	v.shared, v.sharedWith = 0, nil // a published vnode is no batch's copy
	n := len(v.buckets)
	skip := v.querySkip()
	if skip == 0 {
		copy(index, v.keys)
		v.keys = index[:n:n]
		v.q = v.fullView()
	} else {
		// The vnode keeps its own keys for the batches that copy it.
		exact := len(v.minPK)-skip <= 8 && len(v.maxPK)-skip <= 8
		index[0] = 0
		for i := 1; i < n; i++ {
			lower := v.buckets[i].lower()[skip:]
			index[i] = key8(lower)
			exact = exact && len(lower) <= 8
		}
		v.q = keyView{
			keys: index[:n:n], minKey: key8(v.minPK[skip:]), maxKey: key8(v.maxPK[skip:]),
			skip: int32(skip), prefix: v.minPK[:skip:skip], exact: exact, hasMin: true, hasMax: true,
		}
	}
	var sum int64
	start := v.sealedPrefix(was, skip, same)
	if start > 0 {
		copy(index[n:n+start], was.cum[:start])
		sum = int64(was.cum[start]) >> auxBits
	}
	for i := start; i < n; i++ {
		b := &v.buckets[i]
		index[n+i] = uint64(sum<<auxBits) | v.aux(i, skip)
		sum += b.Rows
	}
	index[2*n] = uint64(sum << auxBits)
	v.cum = index[n:]
}

// sealedPrefix returns how many of v's first buckets have the prefix sum
// and aux in was's index that v's index would give them, v's keys past
// skip bytes: the buckets before the first that differs from was's (same
// of them, if not negative), but not the last bucket of either (its aux
// reads maxLive), nor the first if minLive changed (its aux reads it), nor
// any if was is not sealed with the same skip.
func (v *liveVnode) sealedPrefix(was *liveVnode, skip, same int) int {
	if was == nil || len(was.cum) != len(was.buckets)+1 || int(was.q.skip) != skip || was.minLive != v.minLive {
		return 0
	}
	n := min(len(v.buckets), len(was.buckets)) - 1
	if same >= 0 && !verifySame {
		return min(same, n)
	}
	i := 0
	for i < n && v.buckets[i].same(&was.buckets[i]) {
		i++
	}
	if same >= 0 && min(same, n) > i {
		panic(fmt.Sprintf("livebuckets: %d buckets said to be shared with the sealed vnode, %d are", same, i))
	}
	return i
}

// verifySame makes sealedPrefix compare the buckets even when it is told
// how many are shared, and panic if that is wrong (CheckSharedBuckets).
var verifySame bool

// CheckSharedBuckets makes every seal of a commit's vnode compare the
// vnode's buckets with those of the published vnode it was copied from,
// and panic where the batch took more of them as unchanged than are
// (liveVnode.shared, which its log section relied on too): a change of a
// bucket that did not unshare it. For tests: this package's and lsm's turn
// it on in TestMain (not while benchmarking), so that every commit they
// make checks it. Not safe to call while a store commits.
func CheckSharedBuckets(on bool) { verifySame = on }

// anchors are a vnode's pk hints and what is derived from them.
type anchors struct {
	minPK, maxPK   []byte
	minKey, maxKey uint64
	short          bool
}

func (v *liveVnode) anchors() anchors {
	return anchors{v.minPK, v.maxPK, v.minKey, v.maxKey, v.shortHints}
}

func (v *liveVnode) setAnchors(a anchors) {
	v.minPK, v.maxPK, v.minKey, v.maxKey, v.shortHints = a.minPK, a.maxPK, a.minKey, a.maxKey, a.short
}

// setHints sets the smallest and largest pk hints.
func (v *liveVnode) setHints(minPK, maxPK []byte) {
	v.minPK, v.maxPK = minPK, maxPK
	v.minKey, v.maxKey = key8(minPK), key8(maxPK)
	v.shortHints = len(minPK) <= 8 && len(maxPK) <= 8
}

// above reports whether bucket i's lower bound is above pk (whose key8 is
// k). The keys decide unless they are equal.
func (v *liveVnode) above(i int, pk []byte, k uint64) bool {
	if v.keys[i] != k {
		return v.keys[i] > k
	}
	return bytes.Compare(v.buckets[i].lower(), pk) > 0
}

// boundLen returns the length class of bucket i's lower bound past skip
// bytes: from the index for the query view's skip once sealed.
func (v *liveVnode) boundLen(i, skip int) int {
	if v.cum != nil && skip == int(v.q.skip) {
		return auxLen(v.cum[i])
	}
	return lenClass(v.buckets[i].lower()[skip:])
}

// rows returns the live rows of the buckets before bucket i, of bucket i
// itself, and bucket i's aux.
func (v *liveVnode) rows(i int) (before, in int64, aux uint64) {
	if v.cum != nil {
		c, next := int64(v.cum[i])>>auxBits, int64(v.cum[i+1])>>auxBits
		return c, next - c, v.cum[i] & auxMask
	}
	for _, b := range v.buckets[:i] {
		before += b.Rows
	}
	return before, v.buckets[i].Rows, v.aux(i, 0)
}

// compareAnchor compares x (whose key8 is k) with an anchor pk whose key8
// is ak, reading the anchor's bytes only when keys and lengths do not
// decide (compareByKey).
func compareAnchor(x []byte, k uint64, anchor []byte, ak uint64) int {
	if c, ok := compareByKey(k, lenClass(x), ak, lenClass(anchor)); ok {
		return c
	}
	return bytes.Compare(x, anchor)
}

// updateHints keeps minPK and maxPK and their flags current with an op on
// pk, and reports whether they changed.
func (v *liveVnode) updateHints(pk []byte, k uint64, live bool) bool {
	changed := false
	if v.minPK == nil {
		if live {
			v.setHints(slices.Clone(pk), v.maxPK)
			v.minLive, changed = true, true
		}
	} else if c := compareAnchor(pk, k, v.minPK, v.minKey); live && c < 0 {
		v.setHints(slices.Clone(pk), v.maxPK)
		v.minLive, changed = true, true
	} else if c == 0 && v.minLive != live {
		v.minLive, changed = live, true
	}
	if v.maxPK == nil {
		if live {
			v.setHints(v.minPK, slices.Clone(pk))
			v.maxLive, changed = true, true
		}
	} else if c := compareAnchor(pk, k, v.maxPK, v.maxKey); live && c > 0 {
		v.setHints(v.minPK, slices.Clone(pk))
		v.maxLive, changed = true, true
	} else if c == 0 && v.maxLive != live {
		v.maxLive, changed = live, true
	}
	return changed
}

// find returns the index of the bucket holding pk: the last whose lower
// bound is at most pk.
func (v *liveVnode) find(pk []byte) int {
	var p probe
	kv := v.fullView()
	p.start(v, &kv, pk, false)
	p.guess()
	for p.step() {
	}
	return p.bucket()
}
