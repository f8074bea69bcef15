package livebuckets

import "slices"

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
}

// trackAppend follows a delta d that lands in bk, the last bucket of
// vnode k; appended says that d's pk moved the vnode's largest pk.
func (b *Batch) trackAppend(k vkey, bk *bucket, d Delta, appended bool) {
	var r *appendRun
	if b.lastRun != nil && b.lastRunKey == k {
		r = b.lastRun // deltas come vnode by vnode
	} else if r = b.appends[k]; r != nil {
		b.lastRunKey, b.lastRun = k, r
	}
	if r != nil && r.ended {
		return
	}
	if !appended || d.Rows != 1 || !d.Live || b.appendBudget+len(d.PK) > appendRunBudget {
		if r != nil {
			r.ended = true
		}
		return
	}
	if r == nil {
		r = &appendRun{lower: bk.lower(), old: *bk}
		b.appends[k] = r
		b.lastRunKey, b.lastRun = k, r
	}
	r.arena = append(r.arena, d.PK...)
	r.ends = append(r.ends, len(r.arena))
	r.bytes = append(r.bytes, d.Bytes)
	b.appendBudget += len(d.PK)
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
	clear(b.appends)
	b.lastRun = nil
}
