package livebuckets

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/cockroachdb/errors"
)

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
func (b *Batch) Rescans() []Rescan {
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
func (s *State) Rescans() []Rescan {
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
	Counts
	LowerLive  bool
	Calibrated bool
	// SumPos is the sum of the rows' positions between the piece's
	// anchors, each quantized (see bucket.sumPos).
	SumPos float64
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
		p.SumPos = calibrate(lo, hi, a.arena, a.ends)
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
// the bucket's anchors lo and hi, the sum of their positions, each
// quantized: with n rows ranked 1 to n, the sum of rank − n·position over
// them is n(n+1)/2 − n times it, and the mean of that over the rows that
// are not anchors is the offset of the bucket's estimates (bucket.offset).
// The sum follows inserts and deletes exactly (bucket.insert,
// bucket.remove).
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
func calibrate(lo, hi, arena []byte, ends []int) (sumPos float64) {
	start := 0
	for _, end := range ends {
		sumPos += quantize(position(lo, arena[start:end], hi))
		start = end
	}
	return sumPos
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

// ScannedBucket is a rescanned bucket, ready for State.ApplyRescans.
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
// or the last. Publishes one new snapshot, which the next commit persists
// (in its log row). A bucket that no longer exists is an error, and
// nothing is applied.
func (s *State) ApplyRescans(sbs []ScannedBucket) error {
	b := s.Begin()
	for _, sb := range sbs {
		if err := b.applyRescan(sb); err != nil {
			return err
		}
	}
	old := make(map[vkey]*liveVnode, len(b.vnodes))
	for k := range b.vnodes {
		old[k] = s.cur.table(k.table).vnode(k.vnode)
	}
	b.publish()
	s.rescanned(b, old)
	return nil
}

func (b *Batch) applyRescan(sb ScannedBucket) error {
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
	old := v.buckets[i].Counts
	repl := make([]bucket, len(pieces))
	var sum Counts
	for j, p := range pieces {
		repl[j] = bucket{Counts: p.Counts, lowerLive: p.LowerLive && i+j > 0}
		repl[j].setLower(slices.Clone(p.Lower))
		repl[j].calibrate(p)
		if j == 0 {
			repl[j].setLower(v.buckets[i].lower())
		}
		sum = sum.Add(p.Counts)
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
	}
	// A scan is the truth: correct the totals if trusted ops were off.
	d := Counts{Rows: sum.Rows - old.Rows, Bytes: sum.Bytes - old.Bytes}
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
// MetaEntries persist every vnode the recount scanned (folded, not logged),
// Normalize and Rescans apply as after a commit.
func (s *State) Recount(table uint32, scan func(vnode uint16, bounds [][]byte) (VnodeRecount, error)) (*Batch, error) {
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
		var sum Counts
		for _, c := range rc.Buckets {
			sum = sum.Add(c.Counts)
		}
		if t.vnodes[vi] == nil && sum == (Counts{}) && rc.MinPK == nil {
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
			if bk.Counts != c.Counts || bk.lowerLive != (c.LowerLive && i > 0) || !bk.calibrated && c.Calibrated {
				v.unshare(i)
				bk.Counts, bk.lowerLive = c.Counts, c.LowerLive && i > 0
				bk.calibrate(c)
			}
		}
		live := rc.MinPK != nil
		if !bytes.Equal(v.minPK, rc.MinPK) || !bytes.Equal(v.maxPK, rc.MaxPK) || v.minLive != live || v.maxLive != live {
			// Exact hints: the interpolation of the end buckets improves.
			v.setHints(rc.MinPK, rc.MaxPK)
			v.minLive, v.maxLive = live, live
		}
		t.total = t.total.Add(Counts{Rows: sum.Rows - v.total.Rows, Bytes: sum.Bytes - v.total.Bytes})
		v.total = sum
	}
	t.estimates = false
	b.foldAll = true
	return b, nil
}
