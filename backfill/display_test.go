package backfill

import (
	"testing"

	"github.com/lsmstats/lsmstats/stats"
	"github.com/stretchr/testify/require"
)

// fixedEstimator returns the consumed and total rows it is given.
type fixedEstimator struct{ consumed, total *float64 }

func (fixedEstimator) Name() string { return "fixed" }

func (e fixedEstimator) Estimate(Input) (float64, float64) { return *e.consumed, *e.total }

// TestDisplayWithinRange: an estimate that strays past its range (the
// unbiased sum of the vnodes' estimates may, by about a row) is shown
// within 0% and the total, and never 100% before the end.
func TestDisplayWithinRange(t *testing.T) {
	var consumed, total float64
	tr := NewProgressTracker(1, fixedEstimator{&consumed, &total})
	rep := tr.Reporter(0)
	for i, c := range []struct {
		consumed, total float64
		shown           string
	}{
		{-0.4, 1000, "0.00% (0/1000)"},
		{500, 1000, "50.00% (500/1000)"},
		{1000.6, 1000, "99.99% (1000/1000)"},
	} {
		consumed, total = c.consumed, c.total
		epoch := uint64(i + 1)
		require.NoError(t, rep.Update(epoch, []VnodeState{{Vnode: 0}}))
		p, err := tr.Progress(epoch, stats.Snapshot{})
		require.NoError(t, err)
		f := p.Figures[0]
		require.Equal(t, c.shown, f.Shown, "case %d", i)
		require.GreaterOrEqual(t, f.Pct, 0.0)
		require.Less(t, f.Pct, 100.0)
	}
}
