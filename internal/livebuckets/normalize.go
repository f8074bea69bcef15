package livebuckets

// Normalize merges the small and the empty buckets of the touched vnodes
// into their left neighbours. A last bucket that grew too big by rows
// appended above its vnode's largest pk is split at once (splitAppends);
// the other buckets that grew too big are split after the commit
// (Rescans). A merged bucket keeps a calibration when its
// parts had one: each part's sums carried into the merged bucket's frame
// (mergeCalibration), so that a vnode whose buckets merge as it grows (the
// split limit follows its size) is not rescanned for them.
func (b *Batch) Normalize() {
	b.settleAll()
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
		v.unshare(first - 1)     // the merges change the buckets from there on
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
func (b *Batch) coarsen() {
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
	rows       int64
	calibrated bool
	sumPos     float64
	frame      frame
}

// part returns bucket i (bk, which may have been moved) as a part of a
// merge, in its frame before the merge.
func (v *liveVnode) part(bk *bucket, i int) calibratedPart {
	return calibratedPart{rows: bk.Rows, calibrated: bk.calibrated, sumPos: bk.sumPos, frame: v.frame(i)}
}

// mergeCalibration sets the calibration of bucket j, which merges made of
// parts, from theirs: each part's rows lie in the merged frame at a·u + c
// for a row at u in the part's frame (affine), so Σ position is their
// sums moved (rounded to the grid of positions). An uncalibrated part
// with rows, a negative count, or frames that do not compare leave the
// bucket uncalibrated: it is rescanned after the commit, as before.
func (v *liveVnode) mergeCalibration(j int, parts []calibratedPart) {
	v.unshare(j)
	b := &v.buckets[j]
	now := v.frame(j)
	var sumPos float64
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
		sumPos += a*p.sumPos + float64(p.rows)*c
	}
	b.calibrated, b.sumPos = true, quantize(sumPos)
}
