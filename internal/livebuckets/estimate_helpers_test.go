package livebuckets

import "github.com/RoaringBitmap/roaring/v2"

// The tests ask for estimates in types of their own, with the fields of
// package stats' (RowEstimateFields and its kin).
type (
	RowEstimate struct {
		Mean, Rows   float64
		Lower, Upper int64
	}
	RangeQuery struct {
		Vnode       uint16
		Lo, Hi      []byte
		HiInclusive bool
	}
	ScanRange struct {
		StartVnode uint16
		StartPK    []byte
		EndVnode   uint16
		EndPK      []byte
		Rows       int64
	}
)

func (l *Snapshot) EstimateRows(table uint32, vnode uint16, lo, hi []byte) RowEstimate {
	return EstimateRows[RowEstimate](l, table, vnode, lo, hi)
}

func (l *Snapshot) AppendEstimates(dst []RowEstimate, table uint32, qs []RangeQuery) []RowEstimate {
	return AppendEstimates(l, dst, table, qs)
}

func (l *Snapshot) Partition(table uint32, vnodes *roaring.Bitmap, n int) []ScanRange {
	return Partition[ScanRange](l, table, vnodes, n)
}
