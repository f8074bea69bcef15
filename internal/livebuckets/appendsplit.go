package livebuckets

import (
	"slices"
	"sync"
)

// Splits without a scan.
//
// A bucket that grew past its split limit is normally cut after the commit
// by a scan of its rows at the committed epoch (Rescan): the statistics
// know its count, not where its rows lie. One pattern needs no scan: rows
// appended to a vnode above its largest pk, as a backfill fills its MV in
// pk order and a table keyed by a sequence or a time grows. The rows the
// bucket held before the batch are known as a whole — their counts, and
// their calibration carried into the frame that ends at the first
// appended pk (moveFrame) — and the appended rows pass through the batch
// one by one, in pk order. So the bucket splits at the first appended pk:
// the old rows keep their bucket, and the appended rows are cut into
// pieces exactly as a scan of them would cut them. The split is part of the
// commit's own metadata, so it needs no rescan after a restart either.
//
// Anything else that lands in the bucket during the batch (a delete, an
// update, an insert below the appended rows, a second version of one of
// them) ends the run, and the bucket is rescanned as before.

// appendRunBudget bounds the pk bytes a batch keeps for appended rows; a
// batch past it splits its buckets by scans.
const appendRunBudget = 16 << 20

// appendRun is the rows appended to a vnode's last bucket in one batch.
type appendRun struct {
	// bucket is the last bucket's lower bound when the run began (its
	// slice, compared by identity), and old its state then: its rows
	// before the batch's appends, calibrated in the frame that ends at the
	// first appended pk.
	lower []byte
	old   bucket
	// The appended pks in arena, each ending at its ends entry, and their
	// bytes (pk and row).
	arena []byte
	ends  []int
	bytes []int64
	ended bool
	// deferred says that the run's rows are not in the bucket's
	// calibration yet, nor old in the frame that ends at the first of
	// them: old is in oldFrame, the bucket's frame before the run (see
	// "Deferred calibration").
	deferred bool
	oldFrame frame
}

// trackAppend follows a delta d that lands in bk, the last bucket of
// vnode k; appended says that d's pk moved the vnode's largest pk. r is
// the vnode's run so far (b.run), nil if none; it returns the run after d.
func (b *Batch) trackAppend(k vkey, r *appendRun, bk *bucket, d Delta, appended bool) *appendRun {
	if r != nil && r.ended {
		return r
	}
	if !appended || d.Rows != 1 || !d.Live || b.appendBudget+len(d.PK) > appendRunBudget {
		if r != nil {
			r.ended = true
		}
		return r
	}
	if r == nil {
		r = &appendRun{lower: bk.lower(), old: *bk}
		if rb, ok := runBufs.Get().(*runBuf); ok {
			r.arena, r.ends, r.bytes = rb.arena, rb.ends, rb.bytes
		}
		b.appends[k] = r
		b.lastRunKey, b.lastRun, b.runCached = k, r, true
	}
	r.arena = append(r.arena, d.PK...)
	r.ends = append(r.ends, len(r.arena))
	r.bytes = append(r.bytes, d.Bytes)
	b.appendBudget += len(d.PK)
	return r
}

// run returns vnode k's append run in the batch, nil if none. Deltas come
// vnode by vnode, so the answer is kept for the next delta, none too.
func (b *Batch) run(k vkey) *appendRun {
	if b.runCached && b.lastRunKey == k {
		return b.lastRun
	}
	r := b.appends[k]
	b.lastRunKey, b.lastRun, b.runCached = k, r, true
	return r
}

// Deferred calibration.
//
// Each row appended to a calibrated last bucket moves the vnode's largest
// pk, so the bucket's frame: one at a time, its calibration would be
// carried into each new frame (moveFrame) and the row placed in it, three
// frames worked out per row, for a run that a split may throw away at the
// end of the batch. Instead, a run that starts on a calibrated last bucket
// whose vnode has both anchors defers them: its rows change the counts and
// the largest pk only, and settle, before anything else reads or changes
// the bucket, carries the calibration the bucket had before the run (the
// run's old, in oldFrame) into the frame of now and places each of the
// run's rows in it, once. The result is the same sum of positions, rounded
// once rather than at every row. settle also carries old into the frame
// that ends at the run's first pk, which a split gives the rows before the
// run (splitAppends), as the row-by-row run does when it begins.

// defers reports whether delta d (pkKey: key8(d.PK)) on vnode v, whose run
// is r, is an append whose calibration the run defers.
func (b *Batch) defers(r *appendRun, v *liveVnode, d Delta, pkKey uint64) bool {
	if d.Rows != 1 || !d.Live || v.minPK == nil || v.maxPK == nil || b.appendBudget+len(d.PK) > appendRunBudget {
		return false
	}
	if r != nil && (r.ended || !r.deferred) {
		return false
	}
	if r == nil && !v.buckets[len(v.buckets)-1].calibrated {
		return false
	}
	return compareAnchor(d.PK, pkKey, v.maxPK, v.maxKey) > 0
}

// applyDeferred applies d, an append that defers (defers), to vnode k (v),
// whose run is r: what Apply does, but for the end bucket's calibration.
func (b *Batch) applyDeferred(k vkey, r *appendRun, v *liveVnode, d Delta) {
	end := len(v.buckets) - 1
	v.unshare(end)
	bk := &v.buckets[end]
	var from frame
	if r == nil {
		from = v.frame(end)
	}
	r = b.trackAppend(k, r, bk, d, true)
	if !r.deferred {
		r.deferred, r.oldFrame = true, from
	}
	// The largest pk is the run's copy of d's: cloned once, by settle.
	pk := r.arena[len(r.arena)-len(d.PK) : len(r.arena) : len(r.arena)]
	v.setHints(v.minPK, pk)
	v.maxLive = true
	b.seq.vnode, b.seq.bucket = k, end
	b.count(d, v, bk)
}

// settle brings the calibration of the last bucket of vnode v, whose run r
// deferred it, up to date, and r's old into the frame that ends at its
// first pk (see "Deferred calibration").
func (b *Batch) settle(r *appendRun, v *liveVnode) {
	r.deferred = false
	end := len(v.buckets) - 1
	v.unshare(end)
	bk := &v.buckets[end]
	v.setHints(v.minPK, slices.Clone(v.maxPK))
	if a, c, ok := affine(r.oldFrame, v.frame(end)); ok {
		sum := quantize(a*r.old.sumPos + float64(max(r.old.Rows, 0))*c)
		start := 0
		for _, e := range r.ends {
			pk := r.arena[start:e]
			sum += quantize(v.fraction(end, pk, key8(pk)))
			start = e
		}
		bk.sumPos = sum
	} else {
		bk.calibrated = false
	}
	now := v.anchors()
	first := r.arena[:r.ends[0]]
	v.setHints(v.minPK, first)
	at := v.frame(end)
	v.setAnchors(now)
	if a, c, ok := affine(r.oldFrame, at); ok {
		r.old.sumPos = quantize(a*r.old.sumPos + float64(max(r.old.Rows, 0))*c)
	} else {
		r.old.calibrated = false
	}
}

// settleAll settles every run of the batch that deferred its calibration.
func (b *Batch) settleAll() {
	for k, r := range b.appends {
		if r.deferred {
			b.settle(r, b.vnodes[k])
		}
	}
}

// splitAppends splits each vnode's last bucket that its appended rows took
// past the split limit: its rows before the batch stay in it, and the
// appended rows become pieces of the size a rescan would give them. A
// bucket the batch's merges changed is left to the rescan.
func (b *Batch) splitAppends() {
	for k, r := range b.appends {
		v := b.vnodes[k]
		last := len(v.buckets) - 1
		bk := &v.buckets[last]
		if r.ended || !sameSlice(bk.lower(), r.lower) || bk.Rows != r.old.Rows+int64(len(r.ends)) {
			continue
		}
		limit := b.tables[k.table].splitLimit(v.total.Rows)
		if bk.Rows <= limit {
			continue
		}
		first := r.arena[:r.ends[0]]
		lower := first
		if r.old.Rows <= 0 {
			lower = bk.lower() // the bucket held nothing else: its rows are the run's
		}
		sc := NewBucketScan(Rescan{Table: k.table, Vnode: k.vnode, Lower: lower, Target: max(1, limit/2)})
		start := 0
		for j, end := range r.ends {
			sc.Add(r.arena[start:end], r.bytes[j])
			start = end
		}
		sb := sc.Finish()
		if r.old.Rows > 0 {
			old := Piece{
				Lower: bk.lower(), Counts: r.old.Counts, LowerLive: r.old.lowerLive,
				Calibrated: r.old.calibrated, SumPos: r.old.sumPos,
			}
			sb.Rescan.Lower = bk.lower()
			sb.Pieces = slices.Insert(sb.Pieces, 0, old)
			// The vnode's smallest pk is below the run, and its largest
			// is the run's last, already.
			sb.First, sb.Last = nil, nil
		}
		if err := b.applyRescan(sb); err != nil {
			continue // the rescan after the commit splits it instead
		}
	}
	for _, r := range b.appends {
		runBufs.Put(&runBuf{r.arena[:0], r.ends[:0], r.bytes[:0]})
	}
	clear(b.appends)
	b.lastRun, b.runCached = nil, false
}

// runBufs recycles the buffers of append runs (*runBuf) from batch to
// batch: a backfill's every commit appends thousands of rows to a few
// vnodes, and their runs grew new buffers by doubling (a quarter of the
// bytes a vnode-order backfill allocated). A run is dead once splitAppends
// is done with it: settle cloned the largest pk that aliased its arena, and
// the pieces a split made from its pks cloned their bounds (NewBucketScan).
var runBufs sync.Pool

type runBuf struct {
	arena []byte
	ends  []int
	bytes []int64
}
