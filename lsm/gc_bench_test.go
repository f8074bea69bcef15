package lsm

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// estimatorError returns the mean and max error, in percentage points of
// each vnode's live rows, of the physical estimator of live rows below a
// cursor — ssttracker.CountRange(nil, cursor) puts − deletes, scaled by the
// vnode's live rows over its total puts − deletes — against the true count,
// at the cursors 10%, 20%, ..., 90% of each vnode's live pks.
func estimatorError(t testing.TB, s *Store, def TableDef, live map[uint64]string) (mean, worst float64) {
	st := s.Stats()
	byVnode := make([][]uint64, def.VnodeCount)
	for pk := range live {
		v := def.VnodeOf(keys.AppendUint64(nil, pk))
		byVnode[v] = append(byVnode[v], pk)
	}
	var sum float64
	var n int
	for v, pks := range byVnode {
		if len(pks) == 0 {
			continue
		}
		slices.Sort(pks)
		rows := float64(st.Live.Vnode(def.ID, uint16(v)).Rows)
		require.Equal(t, float64(len(pks)), rows)
		tot := st.Physical.Vnode(def.ID, uint16(v))
		net := float64(tot.Puts) - float64(tot.Deletes)
		for q := 1; q <= 9; q++ {
			i := len(pks) * q / 10
			cursor := keys.AppendUint64(nil, pks[i])
			rc := ssttracker.CountRange(statsinternal.VersionOf(st.Physical), def.ID, uint16(v), nil, cursor)
			est := 0.0
			if net > 0 {
				est = (rc.Puts.Est - rc.Deletes.Est) / net * rows
			}
			e := math.Abs(est-float64(i)) / rows * 100
			sum += e
			worst = max(worst, e)
			n++
		}
	}
	return sum / float64(n), worst
}

// liveTableBytes is the size of the live SSTs (obsolete files that Pebble
// has yet to delete are not counted).
func liveTableBytes(s *Store) int64 {
	return s.db.Metrics().Total().TablesSize
}

// BenchmarkGC measures one GC pass at the committed epoch over a table
// after a churn workload (30% updates and 30% deletes of live rows per
// epoch, after an initial load), then a compaction of the table:
//
//	versions/s           versions examined per second of GC
//	deleted/s            versions deleted per second of GC
//	deleted-versions     versions a pass deletes
//	reclaimed-bytes      bytes of live SSTs before GC − after GC and compaction
//	gc-key-value-bytes   key and value bytes of the deleted versions
//	entries/row-before   physical entries per live row before the pass
//	entries/row-after    ... after GC and compaction (1 exactly)
//	est-err-pp-before    mean error of the physical estimator (Range puts −
//	est-err-pp-after     deletes scaled to live rows) at 10%..90% cursors
//	est-maxerr-pp-*      its worst case
//
// Under -short (make bench-smoke) only the table of 20,000 rows.
func BenchmarkGC(b *testing.B) {
	cases := []struct {
		rows, epochs, ops int
	}{
		{rows: 20000, epochs: 40, ops: 1000},
		{rows: 100000, epochs: 40, ops: 5000},
	}
	if testing.Short() {
		cases = cases[:1]
	}
	for _, bc := range cases {
		b.Run(fmt.Sprintf("rows=%d/workload=upd30-del30", bc.rows), func(b *testing.B) {
			var gcTime time.Duration
			var examined, deleted, reclaimed, delBytes int64
			var before, after, errBefore, errAfter, maxBefore, maxAfter float64
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				s, err := Open(b.TempDir(), &Options{Logger: QuietLogger(nil)})
				require.NoError(b, err)
				def := TableDef{ID: 1, VnodeCount: 64, PK: keys.Schema{keys.Uint64}}
				c := newChurn(b, s, def, uint64(i+1))
				c.gen.RowLen = 80
				for range bc.rows / 5000 {
					c.step(5000, 0, 0)
				}
				for range bc.epochs {
					c.step(bc.ops, 30, 30)
				}
				// A settled LSM: what a long-running store would hold.
				require.NoError(b, s.CompactRange(context.Background(), 1, 0, 0))
				st := s.Stats()
				live := float64(st.Live.Table(1).Rows)
				before += float64(st.Physical.Table(1).Counts.Entries) / live
				e, w := estimatorError(b, s, c.def, c.live)
				errBefore += e
				maxBefore = max(maxBefore, w)
				disk := liveTableBytes(s)

				b.StartTimer()
				start := time.Now()
				res, err := s.GC(context.Background(), GCRequest{Table: 1})
				gcTime += time.Since(start)
				b.StopTimer()
				require.NoError(b, err)
				examined += res.Examined
				deleted += res.Deleted
				delBytes += res.DeletedBytes

				require.NoError(b, s.CompactRange(context.Background(), 1, 0, 0))
				st = s.Stats()
				after += float64(st.Physical.Table(1).Counts.Entries) / live
				e, w = estimatorError(b, s, c.def, c.live)
				errAfter += e
				maxAfter = max(maxAfter, w)
				reclaimed += disk - liveTableBytes(s)
				require.NoError(b, s.Close())
			}
			n := float64(b.N)
			b.ReportMetric(float64(examined)/gcTime.Seconds(), "versions/s")
			b.ReportMetric(float64(deleted)/gcTime.Seconds(), "deleted/s")
			b.ReportMetric(float64(deleted)/n, "deleted-versions")
			b.ReportMetric(float64(reclaimed)/n, "reclaimed-bytes")
			b.ReportMetric(float64(delBytes)/n, "gc-key-value-bytes")
			b.ReportMetric(before/n, "entries/row-before")
			b.ReportMetric(after/n, "entries/row-after")
			b.ReportMetric(errBefore/n, "est-err-pp-before")
			b.ReportMetric(errAfter/n, "est-err-pp-after")
			b.ReportMetric(maxBefore, "est-maxerr-pp-before")
			b.ReportMetric(maxAfter, "est-maxerr-pp-after")
		})
	}
}
