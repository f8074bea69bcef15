package livebuckets

import (
	"testing"

	"github.com/lsmstats/lsmstats/keys"
)

// BenchmarkInterleavedCommit is the live statistics' part of a commit of
// the interleaved backfill order (RisingWave's): every commit appends a
// few rows at the end of every vnode of the MV, here 16 to each of 256
// vnodes that hold about 4,000 rows each (a 1M-row table), as
// BenchmarkScale's job does at 4,096 rows a commit. One op is one commit:
// Begin, Apply of each row, Normalize, MetaEntries, Publish and Rescans,
// without the store around them; the metrics are per row and per vnode
// the commit touched.
func BenchmarkInterleavedCommit(b *testing.B) {
	const table, vnodes, perVnode, filled = 1, 256, 16, 4000
	s := NewState()
	s.AddTable(table, vnodes)
	next := make([]uint64, vnodes)
	var epoch uint64
	commit := func() int {
		// The commit's pks first, in one allocation, outside the timing.
		b.StopTimer()
		slab := make([]byte, 0, 8*vnodes*perVnode)
		for vn := range vnodes {
			for range perVnode {
				next[vn]++
				slab = keys.AppendUint64(slab, next[vn]<<8|uint64(vn))
			}
		}
		b.StartTimer()
		epoch++
		bt := s.Begin()
		for vn := range uint16(vnodes) {
			for range perVnode {
				pk := slab[:8:8]
				slab = slab[8:]
				if err := bt.Apply(Delta{Table: table, Vnode: vn, PK: pk, Counts: Counts{1, 110}, Live: true}); err != nil {
					b.Fatal(err)
				}
			}
		}
		bt.Normalize()
		bt.MetaEntries(epoch)
		bt.Publish()
		return len(bt.Rescans())
	}
	for range filled / perVnode {
		commit()
	}
	rescans := 0
	b.ResetTimer()
	for range b.N {
		rescans += commit()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*vnodes*perVnode), "ns/row")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*vnodes), "ns/vnode")
	b.ReportMetric(float64(rescans)/float64(b.N), "rescans/commit")
}
