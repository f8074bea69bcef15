package livebuckets

import (
	"bytes"

	"github.com/RoaringBitmap/roaring/v2"
)

// The estimates are answered in the caller's types: package stats's
// RowEstimate, RangeQuery and ScanRange, whose documentation says what
// each field means, or any struct type with the same fields (the tests').
// Go converts between struct types with the same fields at no cost, so
// the functions below take and return the caller's types through type
// parameters, and the answers are built in place in the caller's slices.

// RowEstimateFields is any struct type with the fields of stats.RowEstimate.
type RowEstimateFields interface {
	~struct {
		Mean, Rows   float64
		Lower, Upper int64
	}
}

// RangeQueryFields is any struct type with the fields of stats.RangeQuery.
type RangeQueryFields interface {
	~struct {
		Vnode       uint16
		Lo, Hi      []byte
		HiInclusive bool
	}
}

// ScanRangeFields is any struct type with the fields of stats.ScanRange.
type ScanRangeFields interface {
	~struct {
		StartVnode uint16
		StartPK    []byte
		EndVnode   uint16
		EndPK      []byte
		Rows       int64
	}
}

// rowEstimate, rangeQuery and scanRange are the types of the fields the
// code below reads and writes.
type (
	rowEstimate struct {
		Mean, Rows   float64
		Lower, Upper int64
	}
	rangeQuery struct {
		Vnode       uint16
		Lo, Hi      []byte
		HiInclusive bool
	}
	scanRange struct {
		StartVnode uint16
		StartPK    []byte
		EndVnode   uint16
		EndPK      []byte
		Rows       int64
	}
)

// EstimateRows estimates the live rows of a vnode of l whose pk lies in
// [lo, hi); nil means unbounded. Buckets entirely inside the range count
// exactly; a bucket holding an end point contributes what it is known to
// hold below the end point to the lower bound, what it may hold to the
// upper bound, and an unbiased estimate between them (see package
// stats).
func EstimateRows[E RowEstimateFields](l *Snapshot, table uint32, vnode uint16, lo, hi []byte) E {
	var out [1]E
	var ps [2]probe
	return estimate(l.table(table), []rangeQuery{{Vnode: vnode, Lo: lo, Hi: hi}}, ps[:], out[:0])[0]
}

// AppendEstimates appends to dst the estimate of each query of l, in
// order. It answers them together, which is what a backfill's checkpoint
// asks (one range per vnode in progress). Each query is a chain of
// dependent memory loads (the vnode, its keys, its prefix sums), cold after
// a commit; taking all the queries through each step of the chain before
// the next lets the CPU overlap the loads of different queries, where one
// query after another waits for each load in turn.
func AppendEstimates[E RowEstimateFields, Q RangeQueryFields](l *Snapshot, dst []E, table uint32, qs []Q) []E {
	// Batches keep the probes on the stack; 64 queries are more loads than
	// the CPU keeps in flight.
	const batch = 64
	var ps [2 * batch]probe
	t := l.table(table)
	for len(qs) > 0 {
		n := min(len(qs), batch)
		dst = estimate(t, qs[:n], ps[:2*n], dst)
		qs = qs[n:]
	}
	return dst
}

// estimate appends the estimates of qs, using ps (two per query) for the
// searches of their end points. Each loop is one step for every probe.
func estimate[E RowEstimateFields, Q RangeQueryFields](t *liveTable, qs []Q, ps []probe, dst []E) []E {
	for i := range qs {
		q := rangeQuery(qs[i])
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
	for i := range qs {
		below := ps[2*i].cumulative()
		upTo := ps[2*i+1].cumulative()
		if rangeQuery(qs[i]).Hi == nil {
			total := ps[2*i+1].v.total.Rows
			upTo = cumBound{lower: total, upper: total, est: float64(total)}
		}
		est := rowEstimate{
			Mean:  upTo.est - below.est,
			Lower: max(0, upTo.lower-below.upper),
			Upper: max(0, upTo.upper-below.lower),
		}
		est.Rows = min(max(est.Mean, float64(est.Lower)), float64(est.Upper))
		dst = append(dst, E(est))
	}
	return dst
}

// Partition cuts the live rows of l of a set of vnodes into at most n ranges of
// about equal size, at bucket boundaries (as GreptimeDB balances scan
// partitions by row counts), so each range's row count is exact and ranges
// differ from the ideal size by at most about one bucket (≤ 1.6% of a vnode).
func Partition[R ScanRangeFields](l *Snapshot, table uint32, vnodes *roaring.Bitmap, n int) []R {
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
	var out []R
	cur := scanRange{StartVnode: vs[0]}
	var acc int64 // rows before the current bucket
	for vi, v := range vs {
		for bi, b := range t.vnode(v).buckets {
			due := int64(len(out)+1) * total / int64(n)
			if len(out) < n-1 && cur.Rows > 0 && acc >= due {
				if bi == 0 {
					cur.EndVnode = vs[vi-1]
					out = append(out, R(cur))
					cur = scanRange{StartVnode: v}
				} else {
					// A copy: the bound is the published bucket's, which
					// a caller writing into its range must not change.
					pk := bytes.Clone(b.lower())
					cur.EndVnode, cur.EndPK = v, pk
					out = append(out, R(cur))
					cur = scanRange{StartVnode: v, StartPK: pk}
				}
			}
			rows := max(0, b.Rows)
			cur.Rows += rows
			acc += rows
		}
	}
	cur.EndVnode = vs[len(vs)-1]
	return append(out, R(cur))
}
