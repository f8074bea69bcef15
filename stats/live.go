package stats

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
// two buckets that hold its end points, which are bounded by [0, bucket rows]
// and estimated by interpolating the pk inside the bucket.
//
// Bucket sizes follow the vnode: a bucket splits when it holds more than
// max(MinSplitRows, rows(vnode)/SplitDivisor) rows, and neighbours merge when
// together they hold less than half of that. A split needs the exact count of
// each piece, which the store gets by scanning the bucket's rows once after
// the commit that made it too big; each row is scanned O(log growth) times
// over the life of a vnode, like a B-tree's splits. With SplitDivisor 96 no
// bucket holds more than 1.04% of its vnode, so the bounds of any range are at
// most 2.1% of the vnode wide.
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
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
)

const (
	// SplitDivisor sets the largest bucket to 1/SplitDivisor of its vnode.
	SplitDivisor = 96
	// MinSplitRows keeps buckets of small vnodes from shrinking below this.
	MinSplitRows = 8
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
	lower []byte // nil for the first bucket
	LiveCounts
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
// two separately allocated bounds cost about 1 µs per vnode.
type liveVnode struct {
	// keys[i] is key8(buckets[i].lower). It follows every change of the
	// buckets' bounds (setBuckets). A batch's copy of the vnode shares it
	// until its bounds change or it is sealed, so it is never written in
	// place.
	keys []uint64
	// cum[i] is the live rows of the buckets before bucket i, for i up to
	// len(buckets), as int64 bits: seal puts it in one allocation with a
	// copy of keys when a batch publishes the vnode. Nil while the vnode is
	// being changed.
	cum []uint64
	// minKey and maxKey are key8 of minPK and maxPK.
	minKey, maxKey uint64
	// shortBounds and shortHints say that every lower bound, and both pk
	// hints, are at most 8 bytes: their keys are exact.
	shortBounds, shortHints bool
	total                   LiveCounts
	buckets                 []bucket // sorted by lower; buckets[0].lower == nil
	// minPK and maxPK are the smallest and largest pk ever inserted: hints
	// that let the first and last bucket interpolate. They may be stale after
	// deletes, which only affects estimates, never bounds.
	minPK, maxPK []byte
}

func newLiveVnode() *liveVnode {
	return &liveVnode{buckets: []bucket{{}}, keys: []uint64{0}, shortBounds: true, shortHints: true}
}

// setBuckets replaces the buckets, whose bounds changed, and their keys.
func (v *liveVnode) setBuckets(bs []bucket) {
	keys := make([]uint64, len(bs))
	short := true
	for i, b := range bs {
		keys[i] = key8(b.lower)
		short = short && len(b.lower) <= 8
	}
	v.buckets, v.keys, v.cum, v.shortBounds = bs, keys, nil, short
}

// appendBucket appends a bucket above every other, for loading.
func (v *liveVnode) appendBucket(b bucket) {
	v.buckets, v.keys, v.cum = append(v.buckets, b), append(v.keys, key8(b.lower)), nil
	v.shortBounds = v.shortBounds && len(b.lower) <= 8
}

// seal builds the index of a vnode about to be published: a copy of its
// keys and the prefix sums of its rows, in one allocation.
func (v *liveVnode) seal() {
	n := len(v.buckets)
	index := make([]uint64, 2*n+1)
	copy(index, v.keys)
	var sum int64
	for i, b := range v.buckets {
		index[n+i] = uint64(sum)
		sum += b.Rows
	}
	index[2*n] = uint64(sum)
	v.keys, v.cum = index[:n:n], index[n:]
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
	return bytes.Compare(v.buckets[i].lower, pk) > 0
}

// rows returns the live rows of the buckets before bucket i, and of bucket
// i itself.
func (v *liveVnode) rows(i int) (before, in int64) {
	if v.cum != nil {
		return int64(v.cum[i]), int64(v.cum[i+1] - v.cum[i])
	}
	for _, b := range v.buckets[:i] {
		before += b.Rows
	}
	return before, v.buckets[i].Rows
}

type liveTable struct {
	vnodes    []*liveVnode // nil entries are vnodes that never had a row
	total     LiveCounts
	estimates bool
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

// PublishedAt returns when the snapshot was published: by the commit whose
// deltas it holds, by a bucket split, or when the store opened and loaded
// it. Commits publish a snapshot even when they change no count, so the
// age of the current snapshot says how long ago the statistics were last
// brought up to date. Zero for a nil Live.
func (l *Live) PublishedAt() time.Time {
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

// Buckets returns the number of buckets of a vnode (for tests and metrics).
func (l *Live) Buckets(table uint32, vnode uint16) int {
	return len(l.table(table).vnode(vnode).buckets)
}

// BucketBounds returns the lower bounds of a vnode's buckets (the first is
// nil), for verification.
func (l *Live) BucketBounds(table uint32, vnode uint16) [][]byte {
	v := l.table(table).vnode(vnode)
	out := make([][]byte, len(v.buckets))
	for i, b := range v.buckets {
		out[i] = b.lower
	}
	return out
}

// BucketCounts returns the counts of a vnode's buckets, for verification.
func (l *Live) BucketCounts(table uint32, vnode uint16) []LiveCounts {
	v := l.table(table).vnode(vnode)
	out := make([]LiveCounts, len(v.buckets))
	for i, b := range v.buckets {
		out[i] = b.LiveCounts
	}
	return out
}

// BucketCount returns the number of buckets over all tables.
func (l *Live) BucketCount() int {
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
	Rows         float64
	Lower, Upper int64
}

// EstimateRows estimates the live rows of a vnode whose pk lies in [lo, hi);
// nil means unbounded. Buckets entirely inside the range count exactly; a
// bucket holding an end point contributes [0, its rows] to the bounds and an
// interpolated share to the estimate.
func (l *Live) EstimateRows(table uint32, vnode uint16, lo, hi []byte) RowEstimate {
	var out [1]RowEstimate
	var ps [2]probe
	return l.table(table).estimate([]RangeQuery{{Vnode: vnode, Lo: lo, Hi: hi}}, ps[:], out[:0])[0]
}

// RangeQuery is a range of AppendEstimates: the live rows of Vnode with pk
// in [Lo, Hi); nil is unbounded.
type RangeQuery struct {
	Vnode  uint16
	Lo, Hi []byte
}

// AppendEstimates appends to dst the EstimateRows of each query, in order.
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
		ps[2*i].start(v, q.Lo)
		ps[2*i+1].start(v, q.Hi)
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
			Rows:  upTo.est - below.est,
			Lower: max(0, upTo.lower-below.upper),
			Upper: max(0, upTo.upper-below.lower),
		}
		est.Rows = math.Min(math.Max(est.Rows, float64(est.Lower)), float64(est.Upper))
		dst = append(dst, est)
	}
	return dst
}

// probe finds the bucket of a vnode that holds x: the last whose lower
// bound is at most x. It searches the keys for the last one at most
// key8(x), then tells apart by their bytes the buckets whose key equals
// x's.
type probe struct {
	v *liveVnode
	x []byte
	k uint64 // key8(x)
	// i and n bracket the search: the last key at most k is among
	// keys[i : i+n]. Once located, i is the bucket holding x.
	i, n int
	// before and rows are the rows before bucket i and in it, once
	// located.
	before, rows int64
}

// start begins the search for x in v; nil x is minus infinity, in bucket
// 0 (keys[0] is 0, at most any k).
func (p *probe) start(v *liveVnode, x []byte) {
	*p = probe{v: v, x: x, k: key8(x), n: len(v.keys)}
	if x == nil {
		p.n = 1
	}
}

// guessWindow is the number of keys around a guess that a probe checks.
const guessWindow = 16

// guess narrows the search to the guessWindow keys around where k lies
// between the vnode's smallest and largest pk, if the keys at the window's
// ends bracket k. Buckets hold about equal rows, so their bounds are
// quantiles of the vnode's pks, and for pks spread evenly over their keys
// (integer ids, hashes, timestamps) the guess is within a few buckets: on
// 256 vnodes of 4,000 uniformly random pks, 99% of guesses hit. A miss
// costs the two loads and leaves the binary search as it was.
func (p *probe) guess() {
	v := p.v
	if p.n <= guessWindow || v.minPK == nil || v.maxPK == nil || v.maxKey <= v.minKey {
		return
	}
	n := p.n
	g := n - 1
	if p.k < v.maxKey {
		g = int(float64(p.k-min(p.k, v.minKey)) / float64(v.maxKey-v.minKey) * float64(n))
	}
	a, b := max(g-guessWindow/2, 0), min(g+guessWindow/2, n)
	if (a == 0 || v.keys[a] <= p.k) && (b == n || v.keys[b] > p.k) {
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
	if p.v.keys[i+half] <= p.k {
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
	i, keys := p.i, p.v.keys
	if i == 0 || keys[i] != p.k {
		return i
	}
	run := sort.Search(i, func(j int) bool { return keys[j] == p.k })
	return run - 1 + sort.Search(i+1-run, func(j int) bool {
		return bytes.Compare(p.v.buckets[run+j].lower, p.x) > 0
	})
}

// locate ends the search: i becomes the bucket holding x, and before and
// rows are read.
func (p *probe) locate() {
	p.i = p.bucket()
	p.before, p.rows = p.v.rows(p.i)
}

// cumBound brackets the live rows with pk < x.
type cumBound struct {
	lower, upper int64
	est          float64
}

// cumulative brackets the live rows with pk < x, once the probe is
// located; nil x is minus infinity.
func (p *probe) cumulative() cumBound {
	if p.x == nil {
		return cumBound{}
	}
	v, i, before, rows := p.v, p.i, p.before, p.rows
	if i > 0 && v.keys[i] == p.k && bytes.Equal(v.buckets[i].lower, p.x) {
		return cumBound{lower: before, upper: before, est: float64(before)}
	}
	rows = max(rows, 0)
	f := v.fraction(i, p.x, p.k)
	return cumBound{lower: before, upper: before + rows, est: float64(before) + f*float64(rows)}
}

// fraction estimates where x (whose key8 is k) lies in bucket i: between
// its lower bound and the next bucket's, or the vnode's smallest and
// largest pk for the first and last buckets; 0.5 when such a hint is
// unknown. The bounds' keys decide when they are the bounds themselves
// (every bound of the vnode is at most 8 bytes), or when they differ by at
// least 2⁸: the bytes past the keys then move the fraction by less than
// 2⁻⁸ of the bucket. Else the bounds' bytes past their shared prefix are
// interpolated, which reads two bounds that a checkpoint meets cold.
func (v *liveVnode) fraction(i int, x []byte, k uint64) float64 {
	loKey := v.keys[i]
	if i == 0 {
		if v.minPK == nil {
			return 0.5
		}
		loKey = v.minKey
	}
	var hi []byte
	var hiKey uint64
	if i+1 < len(v.keys) {
		hiKey = v.keys[i+1]
	} else {
		if v.maxPK == nil {
			return 0.5
		}
		hi, hiKey = v.maxPK, v.maxKey
	}
	if hiKey > loKey && (v.shortBounds && v.shortHints || hiKey-loKey >= 1<<8) {
		switch {
		case k <= loKey:
			return 0
		case k >= hiKey:
			return 1
		}
		return float64(k-loKey) / float64(hiKey-loKey)
	}
	lo := v.buckets[i].lower
	if i == 0 {
		lo = v.minPK
	}
	if hi == nil {
		hi = v.buckets[i+1].lower
	}
	return interpolate(lo, x, hi)
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
					cur.EndVnode, cur.EndPK = v, b.lower
					out = append(out, cur)
					cur = ScanRange{StartVnode: v, StartPK: b.lower}
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

// BucketKey identifies a bucket for persistence.
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
}

// NewLiveState returns an empty state.
func NewLiveState() *LiveState {
	return &LiveState{cur: &Live{tables: map[uint32]*liveTable{}, at: time.Now()}, dirty: map[bucketID]struct{}{}}
}

// Current returns the current snapshot.
func (s *LiveState) Current() *Live { return s.cur }

// AddTable makes room for a table of the given vnode count.
func (s *LiveState) AddTable(table uint32, vnodeCount int) {
	if _, ok := s.cur.tables[table]; ok {
		return
	}
	next := s.cur.cloneTables()
	next.tables[table] = &liveTable{vnodes: make([]*liveVnode, vnodeCount)}
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
	// cursor: last bucket index used per vnode, for sorted input.
	last    vkey
	lastIdx int
	// lastTouched is the bucket Apply last added to touched (its lower
	// aliases the bucket's): sorted input touches each bucket many times in
	// a row, and building the map key copies lower into a string.
	lastTouched    vkey
	lastTouchedLow []byte
	haveTouched    bool
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
		lastIdx: -1,
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
	t := &liveTable{vnodes: slices.Clone(old.vnodes), total: old.total, estimates: old.estimates}
	b.tables[id] = t
	b.next.tables[id] = t
	return t, nil
}

func (b *LiveBatch) vnode(table uint32, vnode uint16) (*liveVnode, error) {
	k := vkey{table, vnode}
	if v, ok := b.vnodes[k]; ok {
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
		shortBounds: old.shortBounds, shortHints: old.shortHints,
	}
	t.vnodes[vnode] = v
	b.vnodes[k] = v
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

// Apply adds the live delta of one pk. Deltas are fastest in (table, vnode,
// pk) order but any order is correct. inserted reports whether the pk's row
// became (or stayed) live, to maintain the interpolation hints.
func (b *LiveBatch) Apply(table uint32, vnode uint16, pk []byte, d LiveCounts, live bool) error {
	v, err := b.vnode(table, vnode)
	if err != nil {
		return err
	}
	k := vkey{table, vnode}
	i := 0
	if pkKey := key8(pk); k == b.last && b.lastIdx >= 0 && b.lastIdx < len(v.buckets) && !v.above(b.lastIdx, pk, pkKey) {
		i = b.lastIdx
		for i+1 < len(v.buckets) && !v.above(i+1, pk, pkKey) {
			i++
		}
	} else {
		i = v.find(pk)
	}
	b.last, b.lastIdx = k, i
	v.buckets[i].LiveCounts = v.buckets[i].Add(d)
	v.total = v.total.Add(d)
	t := b.tables[table]
	t.total = t.total.Add(d)
	if lower := v.buckets[i].lower; !b.haveTouched || b.lastTouched != k || !bytes.Equal(b.lastTouchedLow, lower) {
		b.touched[bucketID{table: table, vnode: vnode, lower: string(lower), first: i == 0}] = struct{}{}
		b.lastTouched, b.lastTouchedLow, b.haveTouched = k, lower, true
	}
	if live {
		if v.minPK == nil || bytes.Compare(pk, v.minPK) < 0 {
			v.setHints(slices.Clone(pk), v.maxPK)
			b.touched[bucketID{table: table, vnode: vnode, first: true}] = struct{}{}
		}
		if v.maxPK == nil || bytes.Compare(pk, v.maxPK) > 0 {
			v.setHints(v.minPK, slices.Clone(pk))
			b.touched[bucketID{table: table, vnode: vnode, first: true}] = struct{}{}
		}
	}
	return nil
}

// find returns the index of the bucket holding pk: the last whose lower
// bound is at most pk.
func (v *liveVnode) find(pk []byte) int {
	var p probe
	p.start(v, pk)
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
func (b *LiveBatch) MetaEntries() []MetaEntry {
	ids := make(map[bucketID]struct{}, len(b.touched)+len(b.s.dirty))
	for id := range b.s.dirty {
		ids[id] = struct{}{}
	}
	for id := range b.touched {
		ids[id] = struct{}{}
	}
	out := make([]MetaEntry, 0, len(ids))
	for id := range ids {
		out = append(out, b.next.metaEntry(id))
	}
	slices.SortFunc(out, func(a, b MetaEntry) int { return bytes.Compare(a.Key, b.Key) })
	return out
}

func (l *Live) metaEntry(id bucketID) MetaEntry {
	t := l.table(id.table)
	if id.lower == estimatesMarker {
		e := MetaEntry{Key: estimatesKey(id.table)}
		if t != nil && t.estimates {
			e.Value = []byte{1}
		} else {
			e.Delete = true
		}
		return e
	}
	key := BucketKey(id.table, id.vnode, []byte(id.lower), id.first)
	v := t.vnode(id.vnode)
	var i int
	if id.first {
		i = 0
	} else {
		i = v.find([]byte(id.lower))
		if i <= 0 || string(v.buckets[i].lower) != id.lower {
			return MetaEntry{Key: key, Delete: true}
		}
	}
	b := v.buckets[i]
	val := binary.AppendVarint(nil, b.Rows)
	val = binary.AppendVarint(val, b.Bytes)
	if i == 0 {
		val = binary.AppendUvarint(val, uint64(len(v.minPK)))
		val = append(val, v.minPK...)
		val = binary.AppendUvarint(val, uint64(len(v.maxPK)))
		val = append(val, v.maxPK...)
	}
	return MetaEntry{Key: key, Value: val}
}

// Normalize merges small neighbouring buckets of the touched vnodes and
// returns the buckets that are too big and must be split by the caller, who
// scans them at the committed epoch and calls ApplySplit.
func (b *LiveBatch) Normalize() {
	for k, v := range b.vnodes {
		limit := splitLimit(v.total.Rows)
		out := v.buckets[:1] // the batch's own copy
		for _, bk := range v.buckets[1:] {
			prev := &out[len(out)-1]
			if prev.Rows+bk.Rows < limit/2 {
				prev.LiveCounts = prev.Add(bk.LiveCounts)
				b.touched[bucketID{table: k.table, vnode: k.vnode, lower: string(prev.lower), first: len(out) == 1}] = struct{}{}
				b.touched[bucketID{table: k.table, vnode: k.vnode, lower: string(bk.lower)}] = struct{}{} // now deleted
				continue
			}
			out = append(out, bk)
		}
		if len(out) < len(v.buckets) {
			v.setBuckets(out)
		}
	}
}

func splitLimit(rows int64) int64 {
	return max(MinSplitRows, (rows+SplitDivisor-1)/SplitDivisor)
}

// Publish makes the batch the current snapshot; its entries are persisted.
func (b *LiveBatch) Publish() {
	b.publish()
	clear(b.s.dirty)
}

// publish seals the batch's vnodes and makes it the current snapshot.
func (b *LiveBatch) publish() {
	for _, v := range b.vnodes {
		v.seal()
	}
	b.next.at = time.Now()
	b.s.cur = b.next
}

// SplitRequest names a bucket to split: the rows of a vnode with pk in
// [Lower, Upper) (nil: unbounded), into pieces of about Target rows.
type SplitRequest struct {
	Table        uint32
	Vnode        uint16
	Lower, Upper []byte
	Target       int64
}

// Oversized returns the buckets of the vnodes this batch touched that exceed
// their vnode's split limit, in (table, vnode, pk) order.
func (b *LiveBatch) Oversized() []SplitRequest {
	var out []SplitRequest
	for k, v := range b.vnodes {
		out = v.oversized(k.table, k.vnode, out)
	}
	sortSplits(out)
	return out
}

// Oversized returns every bucket of the current snapshot that exceeds its
// vnode's split limit. Splits are persisted with the next commit, so after
// a restart the store splits these again: the same scans at the same
// committed epoch give the same buckets, and estimates made before a crash
// are reproduced exactly after it.
func (s *LiveState) Oversized() []SplitRequest {
	var out []SplitRequest
	for id, t := range s.cur.tables {
		for vi, v := range t.vnodes {
			if v != nil {
				out = v.oversized(id, uint16(vi), out)
			}
		}
	}
	sortSplits(out)
	return out
}

func (v *liveVnode) oversized(table uint32, vnode uint16, out []SplitRequest) []SplitRequest {
	limit := splitLimit(v.total.Rows)
	for i, bk := range v.buckets {
		if bk.Rows <= limit {
			continue
		}
		r := SplitRequest{Table: table, Vnode: vnode, Lower: bk.lower, Target: max(1, limit/2)}
		if i+1 < len(v.buckets) {
			r.Upper = v.buckets[i+1].lower
		}
		out = append(out, r)
	}
	return out
}

func sortSplits(out []SplitRequest) {
	slices.SortFunc(out, func(a, b SplitRequest) int {
		if a.Table != b.Table {
			return cmp.Compare(a.Table, b.Table)
		}
		if a.Vnode != b.Vnode {
			return cmp.Compare(a.Vnode, b.Vnode)
		}
		return bytes.Compare(a.Lower, b.Lower)
	})
}

// Piece is a scanned part of a bucket: the rows with pk >= Lower up to the
// next piece.
type Piece struct {
	Lower []byte
	LiveCounts
}

// ApplySplit replaces the bucket [r.Lower, r.Upper) by the scanned pieces,
// whose counts are exact at the committed epoch. pieces[0].Lower must equal
// r.Lower. Publishes a new snapshot and marks the buckets for persistence.
func (s *LiveState) ApplySplit(r SplitRequest, pieces []Piece) error {
	if len(pieces) == 0 || !bytes.Equal(pieces[0].Lower, r.Lower) {
		return errors.AssertionFailedf("split of table %d vnode %d must start at its lower bound", r.Table, r.Vnode)
	}
	b := s.Begin()
	v, err := b.vnode(r.Table, r.Vnode)
	if err != nil {
		return err
	}
	i := v.find(r.Lower)
	if !bytes.Equal(v.buckets[i].lower, r.Lower) {
		return errors.AssertionFailedf("split of a bucket that no longer exists")
	}
	old := v.buckets[i].LiveCounts
	repl := make([]bucket, len(pieces))
	var sum LiveCounts
	for j, p := range pieces {
		repl[j] = bucket{lower: slices.Clone(p.Lower), LiveCounts: p.LiveCounts}
		if j == 0 {
			repl[j].lower = v.buckets[i].lower
		}
		sum = sum.Add(p.LiveCounts)
		b.touched[bucketID{table: r.Table, vnode: r.Vnode, lower: string(repl[j].lower), first: i == 0 && j == 0}] = struct{}{}
	}
	v.setBuckets(slices.Concat(v.buckets[:i], repl, v.buckets[i+1:]))
	// A scan is the truth: correct the totals if trusted ops were off.
	d := LiveCounts{Rows: sum.Rows - old.Rows, Bytes: sum.Bytes - old.Bytes}
	v.total = v.total.Add(d)
	b.tables[r.Table].total = b.tables[r.Table].total.Add(d)
	b.publish()
	for id := range b.touched {
		s.dirty[id] = struct{}{}
	}
	return nil
}

// VnodeRecount is what a scan of one vnode at the committed epoch found:
// the live rows and bytes of each bucket, in the order of the bounds it was
// given, and the smallest and largest live pk (nil without rows).
type VnodeRecount struct {
	Buckets      []LiveCounts
	MinPK, MaxPK []byte
}

// Recount starts a batch that replaces the live counts of every vnode of a
// table by exact ones, and clears the table's estimates flag: what a table
// written by unchecked writers needs to be exact again (CockroachDB
// recomputes a range's stats the same way). scan is called for each vnode
// with the lower bounds of its buckets (the first is nil) and must scan the
// vnode at the committed epoch; the caller holds commits off until the
// batch is published. Nothing is visible until Publish; MetaEntries persist
// the buckets that changed, Normalize and Oversized apply as after a commit.
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
			bounds[i] = old.buckets[i].lower
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
			sum = sum.Add(c)
		}
		if t.vnodes[vi] == nil && sum == (LiveCounts{}) && rc.MinPK == nil {
			continue // never had a row, and has none
		}
		v, err := b.vnode(table, vn)
		if err != nil {
			return nil, err
		}
		for i, c := range rc.Buckets {
			if v.buckets[i].LiveCounts != c {
				v.buckets[i].LiveCounts = c
				b.touched[bucketID{table: table, vnode: vn, lower: string(v.buckets[i].lower), first: i == 0}] = struct{}{}
			}
		}
		if !bytes.Equal(v.minPK, rc.MinPK) || !bytes.Equal(v.maxPK, rc.MaxPK) {
			// Exact hints: the interpolation of the end buckets improves.
			v.setHints(slices.Clone(rc.MinPK), slices.Clone(rc.MaxPK))
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

// ---- Persistence ----------------------------------------------------------

// Metadata names of the live statistics (under keys.MetaTable):
//
//	live/<table u32 BE><vnode u16 BE>\x00              first bucket of a vnode:
//	                                                     rows, bytes (zigzag varints),
//	                                                     min pk, max pk (uvarint length + bytes)
//	live/<table u32 BE><vnode u16 BE>\x01<lower pk>   other buckets: rows, bytes
//	live_est/<table u32 BE>                            present (value 1) while the
//	                                                     table's counts may contain estimates
const (
	livePrefix      = "live/"
	estimatesPrefix = "live_est/"
)

// BucketKey returns the metadata key of a bucket.
func BucketKey(table uint32, vnode uint16, lower []byte, first bool) []byte {
	name := binary.BigEndian.AppendUint32([]byte(livePrefix), table)
	name = binary.BigEndian.AppendUint16(name, vnode)
	if first {
		name = append(name, 0)
	} else {
		name = append(name, 1)
		name = append(name, lower...)
	}
	return keys.MetaKey(name)
}

func estimatesKey(table uint32) []byte {
	return keys.MetaKey(binary.BigEndian.AppendUint32([]byte(estimatesPrefix), table))
}

// LiveSpans are the metadata spans holding live statistics, for loading.
func LiveSpans() [][2][]byte {
	a, b := keys.MetaSpan(livePrefix)
	c, d := keys.MetaSpan(estimatesPrefix)
	return [][2][]byte{{a, b}, {c, d}}
}

// FinishLoad ends loading: it trims each vnode's buckets to their number
// (Load appends them one by one, and the slack of the appends, up to as much
// again, would otherwise stay until a commit copies the vnode), and builds
// the vnodes' indexes, which copy the keys Load appended. Until then queries
// of a loaded vnode sum its buckets.
func (s *LiveState) FinishLoad() {
	for _, t := range s.cur.tables {
		for _, v := range t.vnodes {
			if v != nil {
				v.buckets = slices.Clip(slices.Clone(v.buckets))
				v.seal()
			}
		}
	}
}

// ErrCorruptLive marks undecodable live-statistics metadata.
var ErrCorruptLive = errors.New("lsmstats/stats: corrupt live statistics metadata")

// Load adds one persisted metadata entry (from the spans of LiveSpans, in key
// order) to the state. Tables must have been added first.
func (s *LiveState) Load(key, value []byte) error {
	name, ok := keys.MetaName(key)
	bad := func(what string) error {
		return errors.Wrapf(ErrCorruptLive, "key %x: %s", key, what)
	}
	if !ok {
		return bad("not a metadata key")
	}
	switch {
	case bytes.HasPrefix(name, []byte(estimatesPrefix)):
		if len(name) != len(estimatesPrefix)+4 {
			return bad("bad length")
		}
		t := s.cur.tables[binary.BigEndian.Uint32(name[len(estimatesPrefix):])]
		if t == nil {
			return bad("unknown table")
		}
		t.estimates = true
		return nil
	case bytes.HasPrefix(name, []byte(livePrefix)):
	default:
		return bad("unknown name")
	}
	rest := name[len(livePrefix):]
	if len(rest) < 7 || rest[6] > 1 {
		return bad("truncated")
	}
	table, vnode := binary.BigEndian.Uint32(rest), binary.BigEndian.Uint16(rest[4:])
	first := rest[6] == 0
	if first && len(rest) != 7 {
		return bad("first bucket with a lower bound")
	}
	t := s.cur.tables[table]
	if t == nil || int(vnode) >= len(t.vnodes) {
		return bad("unknown table or vnode")
	}
	rows, n := binary.Varint(value)
	if n <= 0 {
		return bad("rows")
	}
	value = value[n:]
	byts, n := binary.Varint(value)
	if n <= 0 {
		return bad("bytes")
	}
	value = value[n:]
	v := t.vnodes[vnode]
	if v == nil {
		v = newLiveVnode()
		t.vnodes[vnode] = v
	}
	v.cum = nil // until FinishLoad
	c := LiveCounts{Rows: rows, Bytes: byts}
	if first {
		v.buckets[0].LiveCounts = c
		var hints [2][]byte // smallest and largest pk
		for i := range hints {
			l, n := binary.Uvarint(value)
			if n <= 0 || uint64(len(value)-n) < l {
				return bad("pk hint")
			}
			if l > 0 {
				hints[i] = slices.Clone(value[n : n+int(l)])
			}
			value = value[n+int(l):]
		}
		v.setHints(hints[0], hints[1])
	} else {
		lower := slices.Clone(rest[7:])
		if bytes.Compare(v.buckets[len(v.buckets)-1].lower, lower) >= 0 && len(v.buckets) > 1 {
			return bad("bucket out of order")
		}
		v.appendBucket(bucket{lower: lower, LiveCounts: c})
	}
	v.total = v.total.Add(c)
	t.total = t.total.Add(c)
	return nil
}
