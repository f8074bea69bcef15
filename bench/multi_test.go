package bench

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	multiRows    = flag.String("multi-rows", "1000000,20000,5000", "rows of each upstream table of BenchmarkMultiUpstream")
	snapshotRows = flag.String("snapshot-rows", "200000,20000,5000", "rows of each upstream table of BenchmarkSnapshotBackfill")
)

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
				Store: &lsm.Options{Logger: lsm.QuietLogger(nil)}}
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

// BenchmarkSnapshotBackfill is the goal of issue 19's second part: a
// snapshot backfill over three upstream tables (by default 200k, 20k and
// 5k rows, -snapshot-rows: its truth scans each table at the pinned epoch
// at every checkpoint), with churn heavy enough that the log store holds
// far more than 20% of the snapshot's rows when the snapshot phase ends
// (log-pct-at-snapshot-end). The phase-aware stats figure's errors against
// the truth over both phases (err-mean-pp, err-max-pp), RisingWave's
// row-count figure's beside them, the checkpoints of each phase; the run
// fails if a displayed figure decreases or shows 100% before the job
// joined the upstream.
func BenchmarkSnapshotBackfill(b *testing.B) {
	rows, err := ParseRows(*snapshotRows)
	require.NoError(b, err)
	b.Run("rows="+strings.ReplaceAll(*snapshotRows, ",", "+"), func(b *testing.B) {
		var meanPP, maxPP, rcMeanPP, rcMaxPP, logPct float64
		phases := map[string]float64{}
		var t throughput
		for range b.N {
			ps, err := MultiWorkloads(rows, 7)
			require.NoError(b, err)
			// The churn runs over 1.5 times the snapshot phase's barriers:
			// the log store grows during the snapshot phase and drains
			// slowly, the upstream still adding to it.
			total := 0
			for _, n := range rows {
				total += n
			}
			for i := range ps {
				ps[i].UpdateDuring *= 2
				ps[i].DeleteDuring *= 2
				ps[i].InsertDuring *= 2
				ps[i].DuringSteps = max(4, 3*total/(2*2*2048))
			}
			var display backfilltest.Display
			var snapRows float64
			logAt := -1.0
			cfg := Config{Dir: b.TempDir(), Upstreams: ps, Mode: backfill.ModeSnapshot, Actors: 2, ChunkSize: 256, BarrierRows: 2048,
				Store: &lsm.Options{Logger: lsm.QuietLogger(nil)},
				OnCheckpoint: func(r backfill.Record) {
					require.NoError(b, display.Add(r))
					require.Equal(b, r.Phase == "joined", r.Finished)
					phases[r.Phase]++
					if r.Phase == "snapshot" {
						snapRows = float64(r.SnapshotRows)
					} else if logAt < 0 {
						logAt = float64(r.LogConsumed + r.LogPending)
					}
				}}
			sum, err := Run(context.Background(), cfg)
			require.NoError(b, err)
			require.True(b, sum.MVMatches, sum.MVError)
			require.NoError(b, display.Done())
			t.add(sum)
			st, rc := sum.Errors["stats"], sum.Errors["rowcount"]
			meanPP += st.MeanPP
			maxPP = max(maxPP, st.MaxPP)
			rcMeanPP += rc.MeanPP
			rcMaxPP = max(rcMaxPP, rc.MaxPP)
			logPct += 100 * logAt / max(snapRows, 1)
		}
		n := float64(b.N)
		b.ReportMetric(meanPP/n, "err-mean-pp")
		b.ReportMetric(maxPP, "err-max-pp")
		b.ReportMetric(rcMeanPP/n, "rowcount-err-mean-pp")
		b.ReportMetric(rcMaxPP, "rowcount-err-max-pp")
		b.ReportMetric(logPct/n, "log-pct-at-snapshot-end")
		for _, p := range []string{"snapshot", "log store", "joined"} {
			b.ReportMetric(phases[p]/n, "checkpoints-"+strings.ReplaceAll(p, " ", "-"))
		}
		b.ReportMetric(t.store.SnapshotRate(), "rows/s")
		b.ReportMetric(t.store.Backfill.Seconds()*1e9/n, "ns/op")
	})
}
