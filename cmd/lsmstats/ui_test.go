package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/stretchr/testify/require"
)

// TestBarsNeverPassTheirTotal: a load step past the load's last (as the
// step that starts the backfill, which workers once reported: "step 22/21"
// before) does not move the load bar past its end; figures above 100% or
// below 0 do not move a bar past its ends either.
func TestBarsNeverPassTheirTotal(t *testing.T) {
	for _, mode := range []string{"on", "off"} {
		var out bytes.Buffer
		ui := newProgressUI(mode, true, &out)
		for step := uint64(1); step <= 22; step++ {
			ui.load(step, 21)
		}
		rec := &recordJSON{Barrier: 1, Truth: 100.5, Figures: []backfill.Figure{
			{Approach: "rowcount", Pct: 120, Shown: "99.99% (1/1)"}, {Approach: "stats", Pct: -3, Shown: "0.00% (0/1)"}}}
		ui.update(rec, false)
		ui.finish()
		text := out.String()
		require.NotContains(t, text, "22", mode)
		if mode == "off" {
			require.Contains(t, text, "load: step 21 of 21\n")
			continue
		}
		require.Contains(t, text, "step 21/21")
		for _, m := range regexp.MustCompile(`step (\d+)/(\d+)`).FindAllStringSubmatch(text, -1) {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			require.LessOrEqual(t, a, b, m[0])
		}
	}
	require.Equal(t, int64(barScale), barValue(120))
	require.Equal(t, int64(0), barValue(-3))
	require.Equal(t, int64(barScale/2), barValue(50))
}

// TestSummaryComparison: the summary's verdict names the closer approach
// and by how much, and says so plainly when it was exact rather than
// "∞ smaller".
func TestSummaryComparison(t *testing.T) {
	for _, c := range []struct {
		stats, rowcount bench.ErrorStats
		want            string
	}{
		{bench.ErrorStats{MeanPP: 0.05, MaxPP: 0.2}, bench.ErrorStats{MeanPP: 10, MaxPP: 40},
			"The stats approach was closer to the truth: mean error 0.050 pp vs 10.000 pp (200× smaller), max 0.200 pp vs 40.000 pp, than the row-count approach."},
		{bench.ErrorStats{}, bench.ErrorStats{MeanPP: 24.4, MaxPP: 61.4},
			"The stats approach was closer to the truth: mean error 0.000 pp vs 24.400 pp (none: it was exact at every checkpoint), max 0.000 pp vs 61.400 pp, than the row-count approach."},
		{bench.ErrorStats{MeanPP: 3, MaxPP: 5}, bench.ErrorStats{MeanPP: 1, MaxPP: 2},
			"The row-count approach was closer to the truth: mean error 1.000 pp vs 3.000 pp (3× smaller), max 2.000 pp vs 5.000 pp, than the stats approach."},
	} {
		st, rc := c.stats, c.rowcount
		var out bytes.Buffer
		printSummary(&out, &report{Error: map[string]*bench.ErrorStats{"stats": &st, "rowcount": &rc}, Cost: map[string]costJSON{}})
		require.Contains(t, out.String(), c.want)
	}
}

// TestETAAccuracy: the report's ETA accuracy pairs each barrier before the
// first finished one with the time that remained (bench.ETAPointsOf), fills
// every barrier's actual remaining time, and leaves out barriers without
// an ETA the report holds (none shown, or unbounded: -1).
func TestETAAccuracy(t *testing.T) {
	b := func(s int64, truth, eta float64, finished bool) barrierJSON {
		return barrierJSON{TimeNS: s * 1e9, Truth: &truth, Finished: finished, Stats: truth,
			ETA: etaJSON{RemainingS: eta, LowS: eta / 2, HighS: eta * 2}}
	}
	barriers := []barrierJSON{b(0, 0, -1, false), b(20, 20, 80, false), b(60, 60, -1, false), b(90, 90, 20, false), b(100, 100, 0, true), b(110, 100, 0, true)}
	st, wall := etaAccuracy(barriers, nil)
	require.Equal(t, st, wall, "no downtime")
	require.Equal(t, 2, st.N)
	require.InDelta(t, 0.5, st.MedianErr, 1e-9) // errors 0 and 1
	require.InDelta(t, 1.0, st.Coverage, 1e-9)
	for i, want := range []float64{100, 80, 40, 10, 0, 0} {
		require.InDelta(t, want, barriers[i].ActualRemainingS, 1e-9, "barrier %d", i)
		require.InDelta(t, want, barriers[i].ActualRunningS, 1e-9, "barrier %d", i)
	}
	st, wall = etaAccuracy(barriers[:4], nil)
	require.Equal(t, bench.ETAStats{}, st, "no finished barrier")
	require.Equal(t, bench.ETAStats{}, wall, "no finished barrier")

	// A crash between 30 s and 40 s (its last checkpoint, the recovered
	// job's first figure) is left out of the time that remained before
	// it: the ETA of 80 s at 20 s is then exact, and 20 s at 90 s still.
	down := []downtime{{time.Unix(30, 0), time.Unix(40, 0)}}
	barriers[1].ETA = etaJSON{RemainingS: 70, LowS: 60, HighS: 75}
	st, wall = etaAccuracy(barriers, down)
	require.Equal(t, 2, st.N)
	require.InDelta(t, 0.5, st.MedianErr, 1e-9) // errors 0 and 1
	require.InDelta(t, 1.0, st.Coverage, 1e-9)
	require.InDelta(t, (0.125+1)/2, wall.MedianErr, 1e-9) // 70 for 80, 20 for 10
	require.InDelta(t, 0.5, wall.Coverage, 1e-9)          // 80 outside 60–75
	for i, want := range []float64{90, 70, 40, 10, 0, 0} {
		require.InDelta(t, want, barriers[i].ActualRunningS, 1e-9, "barrier %d", i)
	}
	require.InDelta(t, 80, barriers[1].ActualRemainingS, 1e-9)
}

// TestTruthShownNeverGoesBack: the truth computed beside the job may come
// after a newer checkpoint's (the demo once showed "truth 99.31% (barrier
// 204)" on barrier 207, after barrier 206's 100%); an older one is dropped,
// until a recovery takes the job back to an older checkpoint.
func TestTruthShownNeverGoesBack(t *testing.T) {
	var out bytes.Buffer
	ui := newProgressUI("off", true, &out)
	rec := func(barrier uint64, finished bool) *recordJSON {
		return &recordJSON{Barrier: barrier, Truth: -1, Finished: finished, Figures: []backfill.Figure{
			{Approach: "rowcount", Shown: "50.00%"}, {Approach: "stats", Shown: "99.00%"}}}
	}
	ui.truth(206, 100)
	ui.truth(204, 99.31)
	ui.update(rec(207, true), false)
	require.Contains(t, out.String(), "barrier 207: truth 100.00% (barrier 206)")
	require.NotContains(t, out.String(), "99.31")

	ui.update(rec(150, false), true) // a recovery at an older checkpoint
	ui.truth(151, 75)
	ui.update(rec(152, true), false)
	require.Contains(t, out.String(), "barrier 152: truth 75.00% (barrier 151)")
}
