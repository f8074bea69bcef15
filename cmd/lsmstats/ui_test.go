package main

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/stretchr/testify/require"
)

// TestBarsNeverPassTheirTotal: the worker reports the load's steps and then
// the step that starts the backfill, one past the load's last ("step
// 22/21" before); figures above 100% or below 0 do not move a bar past its
// ends either.
func TestBarsNeverPassTheirTotal(t *testing.T) {
	for _, mode := range []string{"on", "off"} {
		var out bytes.Buffer
		ui := newProgressUI(mode, &out)
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
