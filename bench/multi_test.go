package bench

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var multiRows = flag.String("multi-rows", "1000000,20000,5000", "rows of each upstream table of BenchmarkMultiUpstream")

// BenchmarkMultiUpstream is the goal of issue 19's first part: one job over
// three upstream tables (by default 1M, 20k and 5k rows, -multi-rows), with
// churn before and during the backfill, read by the same two actors. Both
// approaches are computed at every checkpoint of the same run, against the
// truth over all three tables: err-mean-pp and err-max-pp for the stats
// approach, rowcount-err-mean-pp and rowcount-err-max-pp for RisingWave's
// Σ row counts over Σ total key counts, and each table's own stats error
// (u<i>-err-max-pp). ns/op is the backfill's time.
func BenchmarkMultiUpstream(b *testing.B) {
	rows, err := ParseRows(*multiRows)
	require.NoError(b, err)
	b.Run("rows="+strings.ReplaceAll(*multiRows, ",", "+"), func(b *testing.B) {
		var meanPP, maxPP, rcMeanPP, rcMaxPP, checkpoints float64
		upMax := make([]float64, len(rows))
		var t throughput
		for range b.N {
			ps, err := MultiWorkloads(rows, 7)
			require.NoError(b, err)
			cfg := Config{Dir: b.TempDir(), Upstreams: ps, Actors: 2, ChunkSize: 256, BarrierRows: 2048,
				Store: &lsm.Options{Logger: lsm.QuietLogger{}}}
			sum, err := Run(context.Background(), cfg)
			require.NoError(b, err)
			require.True(b, sum.MVMatches, sum.MVError)
			t.add(sum)
			st, rc := sum.Errors["stats"], sum.Errors["rowcount"]
			meanPP += st.MeanPP
			maxPP = max(maxPP, st.MaxPP)
			rcMeanPP += rc.MeanPP
			rcMaxPP = max(rcMaxPP, rc.MaxPP)
			checkpoints += float64(st.N)
			for _, r := range sum.Records {
				for i, u := range r.Upstreams {
					for _, f := range u.Figures {
						if f.Approach == "stats" && u.Truth >= 0 {
							upMax[i] = max(upMax[i], abs(f.Raw-u.Truth))
						}
					}
				}
			}
		}
		n := float64(b.N)
		b.ReportMetric(meanPP/n, "err-mean-pp")
		b.ReportMetric(maxPP, "err-max-pp")
		b.ReportMetric(rcMeanPP/n, "rowcount-err-mean-pp")
		b.ReportMetric(rcMaxPP, "rowcount-err-max-pp")
		for i, m := range upMax {
			b.ReportMetric(m, fmt.Sprintf("u%d-err-max-pp", i))
		}
		b.ReportMetric(checkpoints/n, "checkpoints")
		b.ReportMetric(t.store.SnapshotRate(), "rows/s")
		b.ReportMetric(t.store.Backfill.Seconds()*1e9/n, "ns/op")
	})
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
