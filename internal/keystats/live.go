package keystats

// Live statistics: exact live rows and live bytes per (table, vnode), kept
// per pk bucket.
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
// the pk inside the bucket (the package doc says why it is unbiased).
//
// Bucket sizes follow the vnode: a bucket splits when it holds more than
// splitLimit rows — max(MinSplitRows, rows(vnode)/SplitDivisor,
// rows(table)/TableBucketBudget) — and a bucket merges into its left
// neighbour when it is empty or the two together hold less than half of
// that. A split needs the
// exact count of each piece, which the store gets by scanning the bucket's
// rows once after the commit that made it too big (BucketScan, which also
// calibrates each piece); each row is scanned O(log growth) times over the
// life of a vnode, like a B-tree's splits. With SplitDivisor 96 no bucket
// of a large vnode holds more than 1.04% of it, so the bounds of any range
// are at most 2.1% of the vnode wide.
//
// A Live value is an immutable snapshot, safe for concurrent use. LiveState
// owns the current snapshot and the buckets not yet persisted; it is not safe
// for concurrent use (the store serialises commits).

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/pkpos"
)

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

// LiveCounts are live rows and live bytes (pk + row bytes of each live row).
type LiveCounts struct {
	Rows  int64
	Bytes int64
}

// Add returns c + o.
func (c LiveCounts) Add(o LiveCounts) LiveCounts {
	return LiveCounts{Rows: c.Rows + o.Rows, Bytes: c.Bytes + o.Bytes}
}

type bucket struct {
	LiveCounts
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

// stale reports whether the bucket must be rescanned to be calibrated
// again: it has rows but no calibration.
func (b *bucket) stale() bool { return b.Rows > 0 && !b.calibrated }

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
	total                   LiveCounts
	buckets                 []bucket // sorted by lower; buckets[0].lower == nil
	// arena is the allocation the vnode was published in, nil for a
	// batch's private copy.
	arena *arena
}

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
	v.sealInto(make([]uint64, 2*len(v.buckets)+1))
}

func (v *liveVnode) sealInto(index []uint64) {
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
	for i := range v.buckets {
		b := &v.buckets[i]
		index[n+i] = uint64(sum<<auxBits) | v.aux(i, skip)
		sum += b.Rows
	}
	index[2*n] = uint64(sum << auxBits)
	v.cum = index[n:]
}

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

type liveTable struct {
	vnodes    []*liveVnode // nil entries are vnodes that never had a row
	total     LiveCounts
	estimates bool
	// budget is the table's bucket budget (see splitLimit).
	budget int64
	// coarsened is the table's share of the split limit, rows/budget, when
	// Normalize last merged all its vnodes (see coarsen); 0 after a load.
	coarsened int64
}

// splitLimit is the split limit of a vnode of this table holding
// vnodeRows rows.
func (t *liveTable) splitLimit(vnodeRows int64) int64 {
	return splitLimit(vnodeRows, t.total.Rows, t.budget)
}

// Live is an immutable snapshot of the live statistics of every table.
type Live struct {
	tables map[uint32]*liveTable
	// at is when the snapshot was published.
	at time.Time
}

var emptyVnode = func() *liveVnode {
	v := newLiveVnode()
	v.seal()
	return v
}()

func (l *Live) table(id uint32) *liveTable {
	if l == nil {
		return nil
	}
	return l.tables[id]
}

func (t *liveTable) vnode(v uint16) *liveVnode {
	if t == nil || int(v) >= len(t.vnodes) || t.vnodes[v] == nil {
		return emptyVnode
	}
	return t.vnodes[v]
}

// Vnode returns the live counts of one vnode.
func (l *Live) Vnode(table uint32, vnode uint16) LiveCounts {
	return l.table(table).vnode(vnode).total
}

// Tables returns the ids of the tables the snapshot knows (every table of
// the store's catalog, with rows or not), in increasing order.
func (l *Live) Tables() []uint32 {
	if l == nil {
		return nil
	}
	out := make([]uint32, 0, len(l.tables))
	for id := range l.tables {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// publishedAt returns when the snapshot was published: by the commit whose
// deltas it holds, by a bucket split, or when the store opened and loaded
// it. Commits publish a snapshot even when they change no count, so the
// age of the current snapshot says how long ago the statistics were last
// brought up to date. Zero for a nil Live.
func (l *Live) publishedAt() time.Time {
	if l == nil {
		return time.Time{}
	}
	return l.at
}

// Table returns the live counts of a table.
func (l *Live) Table(table uint32) LiveCounts {
	if t := l.table(table); t != nil {
		return t.total
	}
	return LiveCounts{}
}

// Sum returns the live counts of a set of vnodes of a table.
func (l *Live) Sum(table uint32, vnodes *roaring.Bitmap) LiveCounts {
	t := l.table(table)
	var sum LiveCounts
	if t == nil {
		return sum
	}
	it := vnodes.Iterator()
	for it.HasNext() {
		v := it.Next()
		if v >= uint32(len(t.vnodes)) {
			break
		}
		sum = sum.Add(t.vnode(uint16(v)).total)
	}
	return sum
}

// ContainsEstimates reports whether a table's live counts were built from
// unchecked ops since they were last recomputed.
func (l *Live) ContainsEstimates(table uint32) bool {
	t := l.table(table)
	return t != nil && t.estimates
}

// Bucket is one bucket of a vnode's live statistics: the live rows and
// bytes with pk at or above Lower (nil for the first bucket) and below the
// next bucket's, and whether Lower is the pk of a live row.
type Bucket struct {
	Lower []byte
	LiveCounts
	LowerLive bool
}

// VnodeDetail is everything the live statistics hold of one vnode, for
// verification and inspection: its buckets, and the anchors of its first
// and last bucket (no live row is below MinPK or above MaxPK; MinLive and
// MaxLive say whether they are live rows themselves).
type VnodeDetail struct {
	Buckets          []Bucket
	MinPK, MaxPK     []byte
	MinLive, MaxLive bool
}

// Detail returns the buckets and anchors of a vnode of l.
func Detail(l *Live, table uint32, vnode uint16) VnodeDetail {
	v := l.table(table).vnode(vnode)
	d := VnodeDetail{Buckets: make([]Bucket, len(v.buckets)), MinPK: v.minPK, MaxPK: v.maxPK, MinLive: v.minLive, MaxLive: v.maxLive}
	for i, b := range v.buckets {
		d.Buckets[i] = Bucket{Lower: b.lower(), LiveCounts: b.LiveCounts, LowerLive: b.lowerLive}
	}
	return d
}

// bucketCount returns the number of buckets over all tables.
func (l *Live) bucketCount() int {
	n := 0
	if l == nil {
		return 0
	}
	for _, t := range l.tables {
		for _, v := range t.vnodes {
			if v != nil {
				n += len(v.buckets)
			}
		}
	}
	return n
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

// EstimateRows estimates the live rows of a vnode whose pk lies in [lo, hi);
// nil means unbounded. Buckets entirely inside the range count exactly; a
// bucket holding an end point contributes what it is known to hold below
// the end point to the lower bound, what it may hold to the upper bound,
// and an unbiased estimate between them (see the package doc).
func (l *Live) EstimateRows(table uint32, vnode uint16, lo, hi []byte) RowEstimate {
	var out [1]RowEstimate
	var ps [2]probe
	return l.table(table).estimate([]RangeQuery{{Vnode: vnode, Lo: lo, Hi: hi}}, ps[:], out[:0])[0]
}

// RangeQuery is a range of AppendEstimates: the live rows of Vnode with pk
// in [Lo, Hi), or [Lo, Hi] when HiInclusive; a nil Lo or Hi is unbounded.
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

// AppendEstimates appends to dst the estimate of each query, in order.
// It answers them together, which is what a backfill's checkpoint asks (one
// range per vnode in progress). Each query is a chain of dependent memory
// loads (the vnode, its keys, its prefix sums), cold after a commit; taking
// all the queries through each step of the chain before the next lets the
// CPU overlap the loads of different queries, where one query after another
// waits for each load in turn.
func (l *Live) AppendEstimates(dst []RowEstimate, table uint32, qs []RangeQuery) []RowEstimate {
	// Batches keep the probes on the stack; 64 queries are more loads than
	// the CPU keeps in flight.
	const batch = 64
	var ps [2 * batch]probe
	t := l.table(table)
	for len(qs) > 0 {
		n := min(len(qs), batch)
		dst = t.estimate(qs[:n], ps[:2*n], dst)
		qs = qs[n:]
	}
	return dst
}

// estimate appends the estimates of qs, using ps (two per query) for the
// searches of their end points. Each loop is one step for every probe.
func (t *liveTable) estimate(qs []RangeQuery, ps []probe, dst []RowEstimate) []RowEstimate {
	for i, q := range qs {
		v := t.vnode(q.Vnode)
		ps[2*i].start(v, &v.q, q.Lo, false)
		ps[2*i+1].start(v, &v.q, q.Hi, q.HiInclusive)
	}
	for i := range ps {
		ps[i].guess()
	}
	for more := true; more; {
		more = false
		for i := range ps {
			if ps[i].step() {
				more = true
			}
		}
	}
	for i := range ps {
		ps[i].locate()
	}
	for i, q := range qs {
		below := ps[2*i].cumulative()
		upTo := ps[2*i+1].cumulative()
		if q.Hi == nil {
			total := ps[2*i+1].v.total.Rows
			upTo = cumBound{lower: total, upper: total, est: float64(total)}
		}
		est := RowEstimate{
			Mean:  upTo.est - below.est,
			Lower: max(0, upTo.lower-below.upper),
			Upper: max(0, upTo.upper-below.lower),
		}
		est.Rows = min(max(est.Mean, float64(est.Lower)), float64(est.Upper))
		dst = append(dst, est)
	}
	return dst
}

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
// at its rows the estimate is unbiased whatever the keys' shape (see the
// package doc). An exclusive end takes half a row less: a point between
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

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
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
	b := &v.buckets[i]
	if !b.calibrated {
		return
	}
	a, c, ok := affine(was, v.frame(i))
	if !ok {
		b.calibrated = false
		return
	}
	n := float64(max(b.Rows, 0))
	sumPos := a*b.sumPos + n*c
	// Σ rank is unchanged: sumResid = Σ rank − n·sumPos.
	b.sumResid -= n * (sumPos - b.sumPos)
	b.sumPos = sumPos
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

// ScanRange is one part of a Partition: the rows from (StartVnode, StartPK)
// inclusive to (EndVnode, EndPK) exclusive, in (vnode, pk) order. A nil
// StartPK is the start of StartVnode; a nil EndPK is the end of EndVnode.
type ScanRange struct {
	StartVnode uint16
	StartPK    []byte
	EndVnode   uint16
	EndPK      []byte
	// Rows is the exact number of live rows in the range.
	Rows int64
}

// Partition cuts the live rows of a set of vnodes into at most n ranges of
// about equal size, at bucket boundaries (as GreptimeDB balances scan
// partitions by row counts), so each range's row count is exact and ranges
// differ from the ideal size by at most about one bucket (≤ 1.04% of a vnode).
func (l *Live) Partition(table uint32, vnodes *roaring.Bitmap, n int) []ScanRange {
	t := l.table(table)
	if t == nil {
		return nil
	}
	n = max(n, 1)
	var vs []uint16
	var total int64
	it := vnodes.Iterator()
	for it.HasNext() {
		v := it.Next()
		if v >= uint32(len(t.vnodes)) {
			break
		}
		vs = append(vs, uint16(v))
		total += max(0, t.vnode(uint16(v)).total.Rows)
	}
	if len(vs) == 0 {
		return nil
	}
	var out []ScanRange
	cur := ScanRange{StartVnode: vs[0]}
	var acc int64 // rows before the current bucket
	for vi, v := range vs {
		for bi, b := range t.vnode(v).buckets {
			due := int64(len(out)+1) * total / int64(n)
			if len(out) < n-1 && cur.Rows > 0 && acc >= due {
				if bi == 0 {
					cur.EndVnode = vs[vi-1]
					out = append(out, cur)
					cur = ScanRange{StartVnode: v}
				} else {
					// A copy: the bound is the published bucket's, which
					// a caller writing into its range must not change.
					pk := bytes.Clone(b.lower())
					cur.EndVnode, cur.EndPK = v, pk
					out = append(out, cur)
					cur = ScanRange{StartVnode: v, StartPK: pk}
				}
			}
			rows := max(0, b.Rows)
			cur.Rows += rows
			acc += rows
		}
	}
	cur.EndVnode = vs[len(vs)-1]
	return append(out, cur)
}

// ---- Mutation --------------------------------------------------------------

// bucketID identifies a bucket (or, with lower == estimatesMarker, a
// table's estimates marker) whose metadata entry a batch must rewrite.
type bucketID struct {
	table uint32
	vnode uint16
	lower string // "" is the first bucket
	first bool
}

// LiveState owns the current Live snapshot and the set of buckets changed
// since they were last persisted. Not safe for concurrent use.
type LiveState struct {
	cur   *Live
	dirty map[bucketID]struct{}
	// budget is the bucket budget of the tables added from now on.
	budget int64
}

// NewLiveState returns an empty state whose tables have a bucket budget of
// TableBucketBudget.
func NewLiveState() *LiveState {
	return &LiveState{cur: &Live{tables: map[uint32]*liveTable{}, at: time.Now()}, dirty: map[bucketID]struct{}{}, budget: TableBucketBudget}
}

// SetBucketBudget sets the bucket budget of the tables added after it: a
// bucket may hold 1/budget of its table's rows (when that is more than
// 1/SplitDivisor of its vnode, that is when budget < vnodes·SplitDivisor),
// so a table keeps fewer than 8·budget + vnodes buckets whatever its rows:
// neighbours holding together less than half the limit merge, in every
// vnode each time the table's rows/budget doubles (coarsen). Buckets cost
// about 64 bytes plus their bound (a pk), so the budget bounds the table's
// live statistics in memory and their metadata rows, whatever its size; a
// smaller budget widens each range estimate's bounds, which span the two
// buckets holding its end points. A budget below 1 is TableBucketBudget.
// Buckets already stored keep their bounds, and follow the new limit at
// their vnode's next split or merge.
func (s *LiveState) SetBucketBudget(budget int) {
	if budget < 1 {
		budget = TableBucketBudget
	}
	s.budget = int64(budget)
}

// Current returns the current snapshot.
func (s *LiveState) Current() *Live { return s.cur }

// AddTable makes room for a table of the given vnode count.
func (s *LiveState) AddTable(table uint32, vnodeCount int) {
	if _, ok := s.cur.tables[table]; ok {
		return
	}
	next := s.cur.cloneTables()
	next.tables[table] = &liveTable{vnodes: make([]*liveVnode, vnodeCount), budget: s.budget}
	next.at = time.Now()
	s.cur = next
}

func (l *Live) cloneTables() *Live {
	return &Live{tables: maps.Clone(l.tables)}
}

// LiveBatch accumulates the live deltas of one commit on a private copy of
// the touched vnodes. Nothing is visible until Publish.
type LiveBatch struct {
	s       *LiveState
	next    *Live
	tables  map[uint32]*liveTable // copied tables
	vnodes  map[vkey]*liveVnode   // copied vnodes
	touched map[bucketID]struct{}
	seq     sequential
	// appends are the rows each vnode's last bucket gained above its
	// largest pk, for Normalize to split it without a scan (appendRun).
	appends      map[vkey]*appendRun
	appendBudget int
	// lastKey and lastVnode are the vnode of the last lookup: a commit's
	// deltas come in (table, vnode, pk) order, so most lookups repeat it.
	lastKey   vkey
	lastVnode *liveVnode
}

// sequential remembers where the last delta of a batch landed. A commit
// applies its deltas in (table, vnode, pk) order, so the next one lands in
// the same bucket or a few after it, and touches it again.
type sequential struct {
	vnode vkey
	// bucket is the index of the bucket of the last delta in vnode, -1 if
	// none.
	bucket int
	// touchedLower is the lower bound of the bucket the batch last added
	// to touched (it aliases the bucket's): building a touched key copies
	// the bound into a string, which a run of deltas in one bucket skips.
	touched      vkey
	touchedLower []byte
	haveTouched  bool
	// anchors is the vnode whose anchors row the batch last added to
	// touched (a run of appends moves the anchors with every row).
	anchors     vkey
	haveAnchors bool
}

type vkey struct {
	table uint32
	vnode uint16
}

// Begin starts a batch on the current snapshot.
func (s *LiveState) Begin() *LiveBatch {
	return &LiveBatch{
		s:       s,
		next:    s.cur.cloneTables(),
		tables:  map[uint32]*liveTable{},
		vnodes:  map[vkey]*liveVnode{},
		touched: map[bucketID]struct{}{},
		seq:     sequential{bucket: -1},
		appends: map[vkey]*appendRun{},
	}
}

func (b *LiveBatch) table(id uint32) (*liveTable, error) {
	if t, ok := b.tables[id]; ok {
		return t, nil
	}
	old, ok := b.next.tables[id]
	if !ok {
		return nil, errors.Newf("lsmstats/stats: live delta for unknown table %d", id)
	}
	t := &liveTable{vnodes: slices.Clone(old.vnodes), total: old.total, estimates: old.estimates, budget: old.budget, coarsened: old.coarsened}
	b.tables[id] = t
	b.next.tables[id] = t
	return t, nil
}

func (b *LiveBatch) vnode(table uint32, vnode uint16) (*liveVnode, error) {
	k := vkey{table, vnode}
	if b.lastVnode != nil && b.lastKey == k {
		return b.lastVnode, nil
	}
	if v, ok := b.vnodes[k]; ok {
		b.lastKey, b.lastVnode = k, v
		return v, nil
	}
	t, err := b.table(table)
	if err != nil {
		return nil, err
	}
	if int(vnode) >= len(t.vnodes) {
		return nil, errors.Newf("lsmstats/stats: live delta for vnode %d of table %d with %d vnodes", vnode, table, len(t.vnodes))
	}
	old := t.vnode(vnode)
	v := &liveVnode{
		buckets: slices.Clone(old.buckets), keys: old.keys, total: old.total,
		minPK: old.minPK, maxPK: old.maxPK, minKey: old.minKey, maxKey: old.maxKey,
		minLive: old.minLive, maxLive: old.maxLive,
		shortBounds: old.shortBounds, shortHints: old.shortHints,
	}
	t.vnodes[vnode] = v
	b.vnodes[k] = v
	b.lastKey, b.lastVnode = k, v
	return v, nil
}

// MarkEstimates flags a table's counts as possibly containing estimates.
func (b *LiveBatch) MarkEstimates(table uint32) error {
	t, err := b.table(table)
	if err != nil {
		return err
	}
	if !t.estimates {
		t.estimates = true
		b.touched[bucketID{table: table, first: true, lower: estimatesMarker}] = struct{}{}
	}
	return nil
}

const estimatesMarker = "\x00estimates"

// LiveDelta is the change one version of a pk makes to the live
// statistics of its vnode: LiveCounts are the rows (+1 inserts, -1 deletes,
// 0 rewrites) and bytes it adds.
type LiveDelta struct {
	Table uint32
	Vnode uint16
	PK    []byte
	LiveCounts
	// Live reports whether the pk's row is live once the batch is applied
	// (the same for every version of a pk in the batch). It keeps the
	// anchors' flags (lowerLive, minLive, maxLive) exact and moves minPK
	// and maxPK out to new rows.
	Live bool
}

// Apply adds a delta. Deltas are fastest in (table, vnode, pk) order but
// any order is correct.
func (b *LiveBatch) Apply(d LiveDelta) error {
	v, err := b.vnode(d.Table, d.Vnode)
	if err != nil {
		return err
	}
	k := vkey{d.Table, d.Vnode}
	pkKey := key8(d.PK)
	// An anchor moving out to this pk first carries the end buckets'
	// calibration into their new frames, where the pk then lands.
	was := v.anchors()
	if v.updateHints(d.PK, pkKey, d.Live) {
		if !b.seq.haveAnchors || b.seq.anchors != k {
			b.touched[bucketID{table: d.Table, vnode: d.Vnode, first: true}] = struct{}{}
			b.seq.anchors, b.seq.haveAnchors = k, true
		}
		if moved := !sameSlice(was.minPK, v.minPK) || !sameSlice(was.maxPK, v.maxPK); moved {
			now := v.anchors()
			v.setAnchors(was)
			first, last := v.frame(0), v.frame(len(v.buckets)-1)
			v.setAnchors(now)
			if !sameSlice(was.minPK, v.minPK) {
				v.moveFrame(0, first)
			}
			if !sameSlice(was.maxPK, v.maxPK) {
				v.moveFrame(len(v.buckets)-1, last)
			}
		}
	}
	i := b.seq.find(k, v, d.PK, pkKey)
	bk := &v.buckets[i]
	if i == len(v.buckets)-1 {
		b.trackAppend(k, bk, d, !sameSlice(was.maxPK, v.maxPK))
	}
	if bk.calibrated && d.Rows != 0 {
		switch u := v.fraction(i, d.PK, pkKey); {
		case d.Rows > 0:
			bk.insert(u)
		default:
			bk.remove(u)
		}
	}
	bk.LiveCounts = bk.Add(d.LiveCounts)
	if i > 0 && v.keys[i] == pkKey && bk.lowerLive != d.Live && bytes.Equal(bk.lower(), d.PK) {
		bk.lowerLive = d.Live
	}
	v.total = v.total.Add(d.LiveCounts)
	t := b.tables[d.Table]
	t.total = t.total.Add(d.LiveCounts)
	if b.seq.touch(k, bk.lower()) {
		b.touched[bucketID{table: d.Table, vnode: d.Vnode, lower: string(bk.lower()), first: i == 0}] = struct{}{}
	}
	return nil
}

// find returns the bucket of vnode k (v) that holds pk: from the last
// delta's bucket on when pk is not below it, else by a search.
func (q *sequential) find(k vkey, v *liveVnode, pk []byte, pkKey uint64) int {
	i := q.bucket
	if k == q.vnode && i >= 0 && i < len(v.buckets) && !v.above(i, pk, pkKey) {
		for i+1 < len(v.buckets) && !v.above(i+1, pk, pkKey) {
			i++
		}
	} else {
		i = v.find(pk)
	}
	q.vnode, q.bucket = k, i
	return i
}

// touch reports whether the bucket of vnode k with lower bound lower is
// not the one touched last, and remembers it.
func (q *sequential) touch(k vkey, lower []byte) bool {
	if q.haveTouched && q.touched == k && bytes.Equal(q.touchedLower, lower) {
		return false
	}
	q.touched, q.touchedLower, q.haveTouched = k, lower, true
	return true
}

// sameSlice reports whether a and b are the same slice (not only equal).
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
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

// MetaEntry is one metadata key to write (or delete) with a commit.
type MetaEntry struct {
	Key    []byte
	Value  []byte
	Delete bool
}

// MetaEntries returns the metadata keys that persist every bucket changed by
// this batch or since the last publish (splits, merges), sorted by key. After
// the merges of Normalize, buckets that no longer exist are deleted.
//
// A checkpoint of a load or a backfill touches most buckets of its tables
// (thousands per commit), so the entries are made in key order, not sorted
// after: the bucket ids sort by (table, vnode, first, lower), which is the
// order of their keys, and each vnode's ids are then found by one walk
// over its buckets. Keys and values share one buffer.
func (b *LiveBatch) MetaEntries() []MetaEntry {
	ids := make([]bucketID, 0, len(b.touched)+len(b.s.dirty))
	for id := range b.s.dirty {
		ids = append(ids, id)
	}
	for id := range b.touched {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareBucketIDs)
	ids = slices.Compact(ids)
	out := make([]MetaEntry, 0, len(ids))
	buf := make([]byte, 0, 64*len(ids))
	for len(ids) > 0 {
		n := 1
		if !ids[0].estimates() {
			for n < len(ids) && !ids[n].estimates() && ids[n].table == ids[0].table && ids[n].vnode == ids[0].vnode {
				n++
			}
		}
		out, buf = b.next.appendMetaEntries(out, buf, ids[:n])
		ids = ids[n:]
	}
	return out
}

// estimates says that the id is a table's estimates marker, not a bucket.
func (id bucketID) estimates() bool { return id.first && id.lower == estimatesMarker }

// compareBucketIDs orders bucket ids as their metadata keys sort: the
// buckets by table, vnode, the first bucket, then lower bounds (keys end in
// a 0x00 byte, which keeps the bounds' order); the estimates markers, whose
// prefix sorts after the buckets', last, by table.
func compareBucketIDs(a, b bucketID) int {
	if ae, be := a.estimates(), b.estimates(); ae != be {
		if ae {
			return 1
		}
		return -1
	}
	if c := cmp.Compare(a.table, b.table); c != 0 {
		return c
	}
	if c := cmp.Compare(a.vnode, b.vnode); c != 0 {
		return c
	}
	if a.first != b.first {
		if a.first {
			return -1
		}
		return 1
	}
	return strings.Compare(a.lower, b.lower)
}

// Normalize merges the small and the empty buckets of the touched vnodes
// into their left neighbours. A last bucket that grew too big by rows
// appended above its vnode's largest pk is split at once (splitAppends);
// the other buckets that grew too big are split after the commit
// (Rescans). A merged bucket keeps a calibration when its
// parts had one: each part's sums carried into the merged bucket's frame
// (mergeCalibration), so that a vnode whose buckets merge as it grows (the
// split limit follows its size) is not rescanned for them.
func (b *LiveBatch) Normalize() {
	b.coarsen()
	for k, v := range b.vnodes {
		limit := b.tables[k.table].splitLimit(v.total.Rows)
		// Most commits merge nothing: find the first merge before copying.
		first := 1
		for first < len(v.buckets) && !mergesLeft(&v.buckets[first-1], &v.buckets[first], limit) {
			first++
		}
		if first == len(v.buckets) {
			continue
		}
		out := v.buckets[:first] // the batch's own copy
		// starts[j] is the bucket, as they were, whose lower bound out[j]
		// has; parts[j] the parts that merges joined into out[j], in their
		// frames as they were.
		starts := make([]int, first, len(v.buckets))
		for j := range starts {
			starts[j] = j
		}
		var parts map[int][]calibratedPart
		for i, bk := range v.buckets[first:] {
			i += first // bk is bucket i
			prev := &out[len(out)-1]
			if mergesLeft(prev, &bk, limit) {
				j := len(out) - 1
				if parts == nil {
					parts = map[int][]calibratedPart{}
				}
				if _, ok := parts[j]; !ok {
					parts[j] = []calibratedPart{v.part(prev, starts[j])}
				}
				parts[j] = append(parts[j], v.part(&bk, i))
				prev.merge(bk)
				b.touched[bucketID{table: k.table, vnode: k.vnode, lower: string(prev.lower()), first: len(out) == 1}] = struct{}{}
				b.touched[bucketID{table: k.table, vnode: k.vnode, lower: string(bk.lower())}] = struct{}{} // now deleted
				continue
			}
			out = append(out, bk)
			starts = append(starts, i)
		}
		if len(out) < len(v.buckets) {
			v.setBuckets(out)
			for j, ps := range parts {
				v.mergeCalibration(j, ps)
			}
		}
	}
	b.splitAppends()
}

// coarsen adds to the batch every vnode of each table it touched whose
// share of the split limit, rows/budget, has at least doubled since the
// last time, so that Normalize merges them all under the limit. Normalize
// merges only the vnodes a batch touched, and a vnode filled while its
// table was small (an MV filled vnode by vnode) would otherwise keep
// buckets sized for that table, beyond the budget. The passes are
// logarithmic in the table's growth, each O(its buckets).
func (b *LiveBatch) coarsen() {
	for id, t := range b.tables {
		share := splitLimit(0, t.total.Rows, t.budget)
		if share < 2*max(t.coarsened, 1) {
			continue
		}
		t.coarsened = share
		for vi, v := range t.vnodes {
			if v != nil {
				// Cannot fail: the table and the vnode exist.
				_, _ = b.vnode(id, uint16(vi))
			}
		}
	}
}

// mergesLeft says that bucket bk merges into its left neighbour prev: it is
// empty, or together they hold less than half the split limit.
func mergesLeft(prev, bk *bucket, limit int64) bool {
	return bk.Rows <= 0 || 2*(prev.Rows+bk.Rows) < limit
}

// calibratedPart is a bucket that a merge joins to its left neighbour:
// its rows, its calibration, and the frame that calibration is in.
type calibratedPart struct {
	rows             int64
	calibrated       bool
	sumResid, sumPos float64
	frame            frame
}

// part returns bucket i (bk, which may have been moved) as a part of a
// merge, in its frame before the merge.
func (v *liveVnode) part(bk *bucket, i int) calibratedPart {
	return calibratedPart{rows: bk.Rows, calibrated: bk.calibrated, sumResid: bk.sumResid, sumPos: bk.sumPos, frame: v.frame(i)}
}

// mergeCalibration sets the calibration of bucket j, which merges made of
// parts, from theirs: each part's rows lie in the merged frame at a·u + c
// for a row at u in the part's frame (affine), and rank above the rows of
// the parts before it. Σ rank is then the parts' Σ rank shifted by those
// rows, and Σ position their sums moved. An uncalibrated part with rows,
// a negative count, or frames that do not compare leave the bucket
// uncalibrated: it is rescanned after the commit, as before.
func (v *liveVnode) mergeCalibration(j int, parts []calibratedPart) {
	b := &v.buckets[j]
	now := v.frame(j)
	var before, sumRank, sumPos float64
	for _, p := range parts {
		if p.rows < 0 {
			return
		}
		if p.rows == 0 {
			continue
		}
		if !p.calibrated {
			return
		}
		a, c, ok := affine(p.frame, now)
		if !ok {
			return
		}
		n := float64(p.rows)
		sumRank += p.sumResid + n*p.sumPos + n*before
		sumPos += a*p.sumPos + n*c
		before += n
	}
	b.calibrated, b.sumPos, b.sumResid = true, sumPos, sumRank-before*sumPos
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
	b.LiveCounts = b.Add(o.LiveCounts)
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

// Publish makes the batch the current snapshot; its entries are persisted.
func (b *LiveBatch) Publish() {
	b.publish()
	clear(b.s.dirty)
}

// publish seals the batch's vnodes, packed table by table in vnode order
// (see arena.go), and makes it the current snapshot.
func (b *LiveBatch) publish() {
	byTable := map[uint32][]placed{}
	for k, v := range b.vnodes {
		byTable[k.table] = append(byTable[k.table], placed{k.vnode, v})
	}
	for id, ps := range byTable {
		publishTable(b.next.tables[id], b.s.cur.tables[id], ps)
	}
	for k := range b.vnodes {
		b.vnodes[k] = b.next.tables[k.table].vnodes[k.vnode] // the packed copy
	}
	b.lastVnode = nil
	b.next.at = time.Now()
	b.s.cur = b.next
}

// Rescan names a bucket whose rows the store must scan at the committed
// epoch, after the commit that published it: the rows of a vnode with pk in
// [Lower, Upper) (nil: unbounded). A bucket that grew too big is cut into
// pieces of about Target rows; a bucket whose calibration is stale (see
// bucket.stale) has Target 0, and is scanned into one piece.
type Rescan struct {
	Table        uint32
	Vnode        uint16
	Lower, Upper []byte
	Target       int64
}

// Rescans returns the buckets of the vnodes this batch touched that exceed
// their vnode's split limit or whose calibration is stale, in (table,
// vnode, pk) order.
func (b *LiveBatch) Rescans() []Rescan {
	var out []Rescan
	for k, v := range b.vnodes {
		out = v.rescans(k.table, k.vnode, b.next.tables[k.table], out)
	}
	sortRescans(out)
	return out
}

// Rescans returns every bucket of the current snapshot to rescan. Rescans
// are persisted with the next commit, so after a restart the store rescans
// these again: the same scans at the same committed epoch give the same
// buckets, and estimates made before a crash are reproduced exactly after
// it.
func (s *LiveState) Rescans() []Rescan {
	var out []Rescan
	for id, t := range s.cur.tables {
		for vi, v := range t.vnodes {
			if v != nil {
				out = v.rescans(id, uint16(vi), t, out)
			}
		}
	}
	sortRescans(out)
	return out
}

func (v *liveVnode) rescans(table uint32, vnode uint16, t *liveTable, out []Rescan) []Rescan {
	limit := t.splitLimit(v.total.Rows)
	for i := range v.buckets {
		bk := &v.buckets[i]
		var target int64
		switch {
		case bk.Rows > limit:
			target = max(1, limit/2)
		case !bk.stale():
			continue
		}
		r := Rescan{Table: table, Vnode: vnode, Lower: bk.lower(), Target: target}
		if i+1 < len(v.buckets) {
			r.Upper = v.buckets[i+1].lower()
		}
		out = append(out, r)
	}
	return out
}

func sortRescans(out []Rescan) {
	slices.SortFunc(out, func(a, b Rescan) int {
		if a.Table != b.Table {
			return cmp.Compare(a.Table, b.Table)
		}
		if a.Vnode != b.Vnode {
			return cmp.Compare(a.Vnode, b.Vnode)
		}
		return bytes.Compare(a.Lower, b.Lower)
	})
}

// Piece is a scanned part of a vnode: the rows with pk >= Lower up to the
// next piece, whether Lower is the pk of one of them, and the piece's
// calibration (see calibrate).
type Piece struct {
	Lower []byte
	LiveCounts
	LowerLive        bool
	Calibrated       bool
	SumResid, SumPos float64
}

// scanAcc accumulates a scan of consecutive pieces of one vnode, its rows
// fed in pk order: each piece's counts, whether its lower bound is a live
// row, and its calibration, which needs the piece's rows and both its
// anchors, so a piece is finished when the next one opens.
type scanAcc struct {
	pieces []Piece
	// upper is the upper anchor of the last piece; nil means the scan's
	// last row (the vnode's largest pk).
	upper []byte
	// The open piece's pks, in arena, each ending at its ends entry.
	arena       []byte
	ends        []int
	first, last []byte
}

func (a *scanAcc) open(lower []byte) {
	if len(a.pieces) > 0 {
		a.close(lower)
	}
	a.pieces = append(a.pieces, Piece{Lower: lower})
}

func (a *scanAcc) add(pk []byte, rowBytes int64) {
	p := &a.pieces[len(a.pieces)-1]
	if p.Rows == 0 && bytes.Equal(pk, p.Lower) {
		p.LowerLive = true
	}
	p.Rows++
	p.Bytes += rowBytes
	a.arena = append(a.arena, pk...)
	a.ends = append(a.ends, len(a.arena))
	if a.first == nil {
		a.first = slices.Clone(pk)
	}
	a.last = append(a.last[:0], pk...)
}

// close finishes the open piece, whose upper anchor is hi.
func (a *scanAcc) close(hi []byte) {
	p := &a.pieces[len(a.pieces)-1]
	lo := p.Lower
	if lo == nil {
		lo = a.first // the first bucket's anchor: the vnode's smallest pk
	}
	if p.Rows > 0 {
		p.SumResid, p.SumPos = calibrate(lo, hi, a.arena, a.ends)
		p.Calibrated = true
	}
	a.arena, a.ends = a.arena[:0], a.ends[:0]
}

func (a *scanAcc) finish() {
	if a.upper != nil {
		a.close(a.upper)
	} else {
		a.close(a.last) // the vnode's largest pk, a row of the piece
	}
}

// calibrate returns, for a bucket's rows (pks in arena, cut at ends) between
// the bucket's anchors lo and hi, the sum of rank − n·position and the sum
// of position over them: rank counts the rows at or below a row, n is the
// rows. The mean residual over the rows that are not anchors is the offset
// of the bucket's estimates (bucket.offset), and both sums follow inserts
// and deletes exactly (bucket.insert, bucket.remove).
//
// Interpolation in a bucket assumes its rows spread evenly between its
// anchors. Where they do (hashed or sequential keys), the j-th row sits on
// average at j/n of the span from a live lower bound, so n·position counts
// the rows below it and the offset is about 1: the row itself, which an
// estimate of the rows at or below a cursor must count (without it, every
// vnode in progress is short by a row, and a backfill's figure trails the
// truth by as many rows as it has vnodes in progress). Where rows do not
// spread evenly, the offset takes the difference in: rows that share their
// keys up to the bytes that tell the anchors apart (the children of one
// parent, all the rows of a category) sit at one position, and the offset
// adds, on average, the part of such a group that a cursor inside it has
// passed. The estimates of cursors spread over the bucket's rows are then
// unbiased, whichever rows come and go: their errors cancel across vnodes
// instead of adding up.
func calibrate(lo, hi, arena []byte, ends []int) (sumResid, sumPos float64) {
	n := float64(len(ends))
	start := 0
	for j, end := range ends {
		u := position(lo, arena[start:end], hi)
		start = end
		sumResid += float64(j+1) - n*u
		sumPos += u
	}
	return sumResid, sumPos
}

// BucketScan builds the pieces of a rescanned bucket from its rows at the
// committed epoch, fed in pk order: pieces (but the last) of Target rows,
// each with its first row as lower bound, or one piece for Target 0.
type BucketScan struct {
	r   Rescan
	acc scanAcc
}

// NewBucketScan starts the scan of the bucket of r.
func NewBucketScan(r Rescan) *BucketScan {
	sc := &BucketScan{r: r}
	sc.acc.upper = r.Upper
	sc.acc.open(r.Lower)
	return sc
}

// Add adds a row: its pk, and its bytes (pk and row).
func (sc *BucketScan) Add(pk []byte, rowBytes int64) {
	if sc.r.Target > 0 && sc.acc.pieces[len(sc.acc.pieces)-1].Rows >= sc.r.Target {
		sc.acc.open(slices.Clone(pk))
	}
	sc.acc.add(pk, rowBytes)
}

// ScannedBucket is a rescanned bucket, ready for ApplyRescan.
type ScannedBucket struct {
	Rescan
	Pieces []Piece
	// First and Last are the smallest and largest pk scanned (nil without
	// rows): the vnode's when the bucket was its first or last.
	First, Last []byte
}

// Finish ends the scan.
func (sc *BucketScan) Finish() ScannedBucket {
	sc.acc.finish()
	var last []byte
	if sc.acc.first != nil {
		last = slices.Clone(sc.acc.last)
	}
	return ScannedBucket{Rescan: sc.r, Pieces: sc.acc.pieces, First: sc.acc.first, Last: last}
}

// ApplyRescans replaces each rescanned bucket [Lower, Upper) by its
// scanned pieces, whose counts are exact at the committed epoch, and sets
// the vnode's minPK and maxPK from the scan when the bucket was the first
// or the last. Publishes one new snapshot and marks the buckets for
// persistence. A bucket that no longer exists is an error, and nothing is
// applied.
func (s *LiveState) ApplyRescans(sbs []ScannedBucket) error {
	b := s.Begin()
	for _, sb := range sbs {
		if err := b.applyRescan(sb); err != nil {
			return err
		}
	}
	b.publish()
	for id := range b.touched {
		s.dirty[id] = struct{}{}
	}
	return nil
}

func (b *LiveBatch) applyRescan(sb ScannedBucket) error {
	r, pieces := sb.Rescan, sb.Pieces
	if len(pieces) == 0 || !bytes.Equal(pieces[0].Lower, r.Lower) {
		return errors.AssertionFailedf("rescan of table %d vnode %d must start at its lower bound", r.Table, r.Vnode)
	}
	v, err := b.vnode(r.Table, r.Vnode)
	if err != nil {
		return err
	}
	i := v.find(r.Lower)
	if !bytes.Equal(v.buckets[i].lower(), r.Lower) {
		return errors.AssertionFailedf("rescan of a bucket that no longer exists")
	}
	old := v.buckets[i].LiveCounts
	repl := make([]bucket, len(pieces))
	var sum LiveCounts
	for j, p := range pieces {
		repl[j] = bucket{LiveCounts: p.LiveCounts, lowerLive: p.LowerLive && i+j > 0}
		repl[j].setLower(slices.Clone(p.Lower))
		repl[j].calibrate(p)
		if j == 0 {
			repl[j].setLower(v.buckets[i].lower())
		}
		sum = sum.Add(p.LiveCounts)
		b.touched[bucketID{table: r.Table, vnode: r.Vnode, lower: string(repl[j].lower()), first: i == 0 && j == 0}] = struct{}{}
	}
	last := i == len(v.buckets)-1
	v.replaceBucket(i, repl)
	// The scan saw the smallest and largest live pk of a first and a last
	// bucket: the anchors become exact.
	if sb.First != nil && (i == 0 || last) {
		minPK, maxPK, minLive, maxLive := v.minPK, v.maxPK, v.minLive, v.maxLive
		if i == 0 {
			minPK, minLive = sb.First, true
		}
		if last {
			maxPK, maxLive = sb.Last, true
		}
		v.setHints(minPK, maxPK)
		v.minLive, v.maxLive = minLive, maxLive
		b.touched[bucketID{table: r.Table, vnode: r.Vnode, first: true}] = struct{}{}
	}
	// A scan is the truth: correct the totals if trusted ops were off.
	d := LiveCounts{Rows: sum.Rows - old.Rows, Bytes: sum.Bytes - old.Bytes}
	v.total = v.total.Add(d)
	b.tables[r.Table].total = b.tables[r.Table].total.Add(d)
	return nil
}

// VnodeScan recounts one vnode from its rows at the committed epoch, fed in
// pk order, against the lower bounds of its buckets.
type VnodeScan struct {
	bounds [][]byte
	acc    scanAcc
}

// NewVnodeScan starts the scan of a vnode whose buckets have the given
// lower bounds (the first is nil).
func NewVnodeScan(bounds [][]byte) *VnodeScan {
	sc := &VnodeScan{bounds: bounds}
	sc.acc.open(nil)
	return sc
}

// Add adds a row: its pk, and its bytes (pk and row).
func (sc *VnodeScan) Add(pk []byte, rowBytes int64) {
	for b := len(sc.acc.pieces); b < len(sc.bounds) && bytes.Compare(pk, sc.bounds[b]) >= 0; b++ {
		sc.acc.open(sc.bounds[b])
	}
	sc.acc.add(pk, rowBytes)
}

// VnodeRecount is what a scan of one vnode at the committed epoch found:
// each bucket's counts, whether its lower bound is a live row and its
// calibration, in the order of the bounds it was given, and the smallest
// and largest live pk (nil without rows).
type VnodeRecount struct {
	Buckets      []Piece
	MinPK, MaxPK []byte
}

// Recount ends the scan.
func (sc *VnodeScan) Recount() VnodeRecount {
	for b := len(sc.acc.pieces); b < len(sc.bounds); b++ {
		sc.acc.open(sc.bounds[b])
	}
	sc.acc.finish()
	rc := VnodeRecount{Buckets: sc.acc.pieces, MinPK: sc.acc.first}
	if sc.acc.first != nil {
		rc.MaxPK = slices.Clone(sc.acc.last)
	}
	return rc
}

// Recount starts a batch that replaces the live counts of every vnode of a
// table by exact ones, and clears the table's estimates flag: what a table
// written by unchecked writers needs to be exact again (CockroachDB
// recomputes a range's stats the same way). scan is called for each vnode
// with the lower bounds of its buckets (the first is nil) and must scan the
// vnode at the committed epoch (NewVnodeScan); the caller holds commits off
// until the batch is published. Nothing is visible until Publish;
// MetaEntries persist the buckets that changed, Normalize and Rescans
// apply as after a commit.
func (s *LiveState) Recount(table uint32, scan func(vnode uint16, bounds [][]byte) (VnodeRecount, error)) (*LiveBatch, error) {
	b := s.Begin()
	t, err := b.table(table)
	if err != nil {
		return nil, err
	}
	for vi := range t.vnodes {
		vn := uint16(vi)
		old := t.vnode(vn)
		bounds := make([][]byte, len(old.buckets))
		for i := range old.buckets {
			bounds[i] = old.buckets[i].lower()
		}
		rc, err := scan(vn, bounds)
		if err != nil {
			return nil, err
		}
		if len(rc.Buckets) != len(bounds) {
			return nil, errors.AssertionFailedf("recount of table %d vnode %d: %d buckets for %d bounds",
				table, vn, len(rc.Buckets), len(bounds))
		}
		var sum LiveCounts
		for _, c := range rc.Buckets {
			sum = sum.Add(c.LiveCounts)
		}
		if t.vnodes[vi] == nil && sum == (LiveCounts{}) && rc.MinPK == nil {
			continue // never had a row, and has none
		}
		v, err := b.vnode(table, vn)
		if err != nil {
			return nil, err
		}
		for i, c := range rc.Buckets {
			// A bucket whose counts were right keeps its calibration
			// (unless it has none): a recount of exact statistics changes
			// nothing.
			bk := &v.buckets[i]
			if bk.LiveCounts != c.LiveCounts || bk.lowerLive != (c.LowerLive && i > 0) || !bk.calibrated && c.Calibrated {
				bk.LiveCounts, bk.lowerLive = c.LiveCounts, c.LowerLive && i > 0
				bk.calibrate(c)
				b.touched[bucketID{table: table, vnode: vn, lower: string(bk.lower()), first: i == 0}] = struct{}{}
			}
		}
		live := rc.MinPK != nil
		if !bytes.Equal(v.minPK, rc.MinPK) || !bytes.Equal(v.maxPK, rc.MaxPK) || v.minLive != live || v.maxLive != live {
			// Exact hints: the interpolation of the end buckets improves.
			v.setHints(rc.MinPK, rc.MaxPK)
			v.minLive, v.maxLive = live, live
			b.touched[bucketID{table: table, vnode: vn, first: true}] = struct{}{}
		}
		t.total = t.total.Add(LiveCounts{Rows: sum.Rows - v.total.Rows, Bytes: sum.Bytes - v.total.Bytes})
		v.total = sum
	}
	if t.estimates {
		t.estimates = false
		b.touched[bucketID{table: table, first: true, lower: estimatesMarker}] = struct{}{}
	}
	return b, nil
}
