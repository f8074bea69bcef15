package bench

import (
	"context"
	"flag"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

// The accuracy goals of the stats approach, in percentage points of the
// truth, at every checkpoint of every cell (restart included).
const (
	goalMeanPP   = 0.2
	goalMaxPP    = 1.0
	goalSignedPP = 0.1
)

var (
	matrixCells  = flag.String("matrix-cells", "", "run only the accuracy matrix cells whose name contains this")
	matrixSeed   = flag.Uint64("matrix-seed", 0, "workload seed of the accuracy matrix (0: testutil.DefaultSeed, or time based with -random-seeds)")
	matrixBudget = flag.Int("matrix-bucket-budget", 0, "the store's StatsBucketBudget in every cell of the accuracy matrix (0: the default)")
)

// reducedMatrix is the part of the accuracy matrix that make test runs:
// every pk shape at 10k rows, in 1, 4, 256 and 4096 vnodes, each vnode
// count with another churn pattern. Under the race detector, which slows
// the store tenfold, and under -short (make bench-smoke), each shape runs
// one of those cells.
func reducedMatrix() []Cell {
	var out []Cell
	for i, shape := range workload.Shapes() {
		cells := []Cell{
			{shape, 10_000, 4096, During, *matrixBudget},
			{shape, 10_000, 256, PrefixDeletes, *matrixBudget},
			{shape, 10_000, 4, Updates, *matrixBudget},
			{shape, 10_000, 1, NoChurn, *matrixBudget},
		}
		if raceEnabled || testing.Short() {
			cells = cells[i%len(cells) : i%len(cells)+1]
		}
		out = append(out, cells...)
	}
	return out
}

// TestAccuracyMatrix runs the reduced accuracy matrix and asserts the
// goals of the stats approach in every cell; the row-count approach's
// errors on the same runs are logged beside them.
func TestAccuracyMatrix(t *testing.T) {
	seed := testutil.Seed(t, "matrix-seed", *matrixSeed)
	for _, c := range reducedMatrix() {
		if *matrixCells != "" && !strings.Contains(c.String(), *matrixCells) {
			continue
		}
		t.Run(c.String(), func(t *testing.T) {
			sum, err := c.Run(context.Background(), t.TempDir(), seed)
			require.NoError(t, err)
			st, rc := sum.Errors["stats"], sum.Errors["rowcount"]
			require.NotNil(t, st)
			require.Greater(t, st.N, matrixCheckpoints/4, "checkpoints measured")
			t.Logf("%d checkpoints: stats mean %.3f max %.3f signed %+.3f pp, bounds %.3f pp wide (max %.3f); rowcount mean %.2f max %.2f signed %+.2f pp",
				st.N, st.MeanPP, st.MaxPP, st.SignedPP, st.WidthMeanPP, st.WidthMaxPP, rc.MeanPP, rc.MaxPP, rc.SignedPP)
			require.Equal(t, st.N, st.Bounded, "every stats figure has bounds")
			require.Zero(t, st.Outside, "checkpoints whose truth lay outside the stats figure's bounds")
			require.LessOrEqual(t, st.MeanPP, goalMeanPP, "stats mean error")
			require.LessOrEqual(t, st.MaxPP, goalMaxPP, "stats max error")
			require.LessOrEqual(t, math.Abs(st.SignedPP), goalSignedPP, "stats bias")
		})
	}
}

var matrixRows = flag.String("matrix-rows", "", "table sizes of BenchmarkAccuracyMatrix's full matrix, e.g. 10000,100000,1000000 (make matrix); empty: the reduced matrix of make test")

// BenchmarkAccuracyMatrix runs the accuracy matrix: with -matrix-rows every
// pk shape, table size, vnode count (1, 4, 256, 4096) and churn pattern
// (make matrix: 10k, 100k and 1M rows, 288 cells), else the reduced matrix
// of TestAccuracyMatrix (make bench). Each cell runs once (the backfill
// with both approaches, a restart halfway) and reports the stats and
// row-count approaches' mean, max and signed mean error against the truth
// over every checkpoint, in percentage points, the stats figure's bounds
// (mean and largest width, checkpoints whose truth lay outside), and the
// stats estimator's CPU per checkpoint. ns/op is the cell's backfill time.
// make results tabulates it in docs/results.md and docs/accuracy.md.
func BenchmarkAccuracyMatrix(b *testing.B) {
	cells := reducedMatrix()
	if *matrixRows != "" {
		cells = nil
		for _, f := range strings.Split(*matrixRows, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(b, err, "-matrix-rows")
			for _, shape := range workload.Shapes() {
				for _, vnodes := range []int{1, 4, 256, 4096} {
					for _, churn := range Churns() {
						cells = append(cells, Cell{shape, n, vnodes, churn, *matrixBudget})
					}
				}
			}
		}
	}
	for _, c := range cells {
		if *matrixCells != "" && !strings.Contains(c.String(), *matrixCells) {
			continue
		}
		b.Run(c.String(), func(b *testing.B) {
			var st, rc ErrorStats
			var cpu, seconds float64
			for i := range b.N {
				sum, err := c.Run(context.Background(), b.TempDir(), uint64(i)+1)
				require.NoError(b, err)
				st.merge(sum.Errors["stats"])
				rc.merge(sum.Errors["rowcount"])
				cpu += sum.ProgressNanos["stats"]
				seconds += sum.Backfill.Seconds()
			}
			n := float64(b.N)
			b.ReportMetric(st.MeanPP, "stats-mean-pp")
			b.ReportMetric(st.MaxPP, "stats-max-pp")
			b.ReportMetric(st.SignedPP, "stats-signed-pp")
			b.ReportMetric(st.WidthMeanPP, "stats-bounds-mean-pp")
			b.ReportMetric(st.WidthMaxPP, "stats-bounds-max-pp")
			b.ReportMetric(float64(st.Outside), "stats-outside-bounds")
			b.ReportMetric(rc.MeanPP, "rowcount-mean-pp")
			b.ReportMetric(rc.MaxPP, "rowcount-max-pp")
			b.ReportMetric(rc.SignedPP, "rowcount-signed-pp")
			b.ReportMetric(cpu/n, "stats-cpu-ns/barrier")
			b.ReportMetric(float64(st.N)/n, "checkpoints")
			b.ReportMetric(seconds*1e9/n, "ns/op")
		})
	}
}
