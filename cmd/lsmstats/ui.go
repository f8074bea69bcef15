package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// progressUI shows the run: live bars (mpb) for the load, the truth (unless
// --no-truth) and both approaches on a terminal, or a line per few
// checkpoints otherwise. The stats figure shows its bounds, and each line
// the snapshot rows/s and the ETA with its interval. The truth comes apart
// from its checkpoint (computed beside the job): its bar shows the last
// one that came, with its barrier.
type progressUI struct {
	w         io.Writer
	bars      bool
	withTruth bool

	p                               *mpb.Progress
	loadBar, truthBar, rowcnt, stat *mpb.Bar
	mu                              sync.Mutex
	text                            map[string]string
	lastLine                        time.Time
	lastTruth                       string // the newest truth that came, for lines without bars
	truthBarrier                    uint64 // the barrier of lastTruth
	done                            bool   // finish or stop ran
}

const barScale = 10000 // 0.01% resolution

func newProgressUI(mode string, withTruth bool, w io.Writer) *progressUI {
	ui := &progressUI{w: w, withTruth: withTruth, text: map[string]string{}}
	switch mode {
	case "on":
		ui.bars = true
	case "off":
	default:
		if f, ok := w.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
				ui.bars = true
			}
		}
	}
	if ui.bars {
		// --bars on draws them on any output, not only a terminal.
		ui.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(48), mpb.WithRefreshRate(120*time.Millisecond),
			mpb.WithAutoRefresh())
	}
	return ui
}

func (ui *progressUI) bar(name string, total int64) *mpb.Bar {
	return ui.p.AddBar(total,
		mpb.PrependDecorators(decor.Name(fmt.Sprintf("%-9s", name))),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			ui.mu.Lock()
			defer ui.mu.Unlock()
			return ui.text[name]
		})),
	)
}

func (ui *progressUI) setText(name, s string) {
	ui.mu.Lock()
	ui.text[name] = s
	ui.mu.Unlock()
}

// load shows the load's progress. The step that starts the backfill comes
// after the last load step: a bar and its text never go past their total.
func (ui *progressUI) load(step, of uint64) {
	step = min(step, of)
	if !ui.bars {
		if step == of || time.Since(ui.lastLine) > 2*time.Second {
			fmt.Fprintf(ui.w, "load: step %d of %d\n", step, of)
			ui.lastLine = time.Now()
		}
		return
	}
	if ui.loadBar == nil {
		ui.loadBar = ui.bar("load", int64(max(of, 1)))
	}
	ui.setText("load", fmt.Sprintf("step %d/%d", step, of))
	ui.loadBar.SetCurrent(int64(step))
}

// update shows a checkpoint (or the figure right after a recovery).
func (ui *progressUI) update(r *recordJSON, recovered bool) {
	rc, st := r.figure("rowcount"), r.figure("stats")
	if recovered {
		// The job went back to its last checkpoint: truths from there on
		// are newer than any from before the crash.
		ui.truthBarrier = min(ui.truthBarrier, r.Barrier)
	}
	if !ui.bars {
		if recovered || r.Finished || time.Since(ui.lastLine) > time.Second {
			tag := "barrier"
			if recovered {
				tag = "recovered at barrier"
			}
			truth := ""
			switch {
			case r.Truth >= 0:
				ui.truth(r.Barrier, r.Truth)
				truth = fmt.Sprintf("truth %.2f%%  ", r.Truth)
			case ui.withTruth:
				// Computed beside the job: the last that came.
				truth = "truth " + ui.lastTruth + "  "
			}
			fmt.Fprintf(ui.w, "%s %d: %srowcount %s  stats %s  %s%s\n", tag, r.Barrier, truth, rc.Shown, st.Shown, rateETA(r), perUpstream(r))
			ui.lastLine = time.Now()
		}
		return
	}
	if ui.rowcnt == nil {
		if ui.loadBar != nil {
			ui.loadBar.SetTotal(-1, true)
		}
		if ui.withTruth {
			ui.truthBar = ui.bar("truth", barScale)
		}
		ui.rowcnt = ui.bar("rowcount", barScale)
		ui.stat = ui.bar("stats", barScale)
	}
	if r.Truth >= 0 {
		ui.truth(r.Barrier, r.Truth)
	}
	ui.setText("rowcount", fmt.Sprintf("%s  raw %.2f%%", rc.Shown, rc.Raw))
	ui.setText("stats", fmt.Sprintf("%s  raw %.2f%%  %s%s", st.Shown, st.Raw, rateETA(r), perUpstream(r)))
	ui.rowcnt.SetCurrent(barValue(rc.Pct))
	ui.stat.SetCurrent(barValue(st.Pct))
}

// truth shows a checkpoint's truth, which may come after its checkpoint's
// figures, and after a newer checkpoint's truth: an older one than the
// truth shown is dropped, so that the truth shown never goes back.
func (ui *progressUI) truth(barrier uint64, pct float64) {
	if ui.lastTruth != "" && barrier < ui.truthBarrier {
		return
	}
	ui.truthBarrier = barrier
	ui.lastTruth = fmt.Sprintf("%.2f%% (barrier %d)", pct, barrier)
	if ui.truthBar == nil {
		return
	}
	ui.setText("truth", fmt.Sprintf("%.2f%%  (barrier %d)", pct, barrier))
	ui.truthBar.SetCurrent(barValue(pct))
}

// perUpstream formats each upstream table's stats figure beside the job's,
// for a job over several ("  [tables: 41.20% 100.00% 3.10%]"), and a
// snapshot backfill's phase and log rows ("  [log store: 1,200 consumed,
// 800 pending]").
func perUpstream(r *recordJSON) string {
	s := ""
	if r.Phase != "" {
		s = fmt.Sprintf("  [%s: log %s consumed, %s pending]", r.Phase, thousands(float64(r.LogConsumed)), thousands(float64(r.LogPending)))
	}
	if len(r.Upstreams) < 2 {
		return s
	}
	s += "  [tables:"
	for _, u := range r.Upstreams {
		s += fmt.Sprintf(" %.2f%%", backfill.FigureOf(u.Figures, "stats").Pct)
	}
	return s + "]"
}

// barValue is a percentage as a bar's current value, within [0, barScale].
func barValue(pct float64) int64 {
	return min(max(int64(pct*barScale/100), 0), barScale)
}

// rateETA formats a record's snapshot rows/s, rate limit and ETA:
// "2,345 rows/s (limit 3,000)  ETA 3m10s (2m50s–3m40s)".
func rateETA(r *recordJSON) string {
	s := fmt.Sprintf("%s rows/s", thousands(r.ETA.RowsPerS))
	if r.RateLimit > 0 {
		s += fmt.Sprintf(" (limit %s)", thousands(r.RateLimit))
	}
	return s + "  " + r.ETA.Shown
}

// thousands formats a non-negative number rounded to an integer with
// thousands separators.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", x)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func (ui *progressUI) crash(n int) {
	if !ui.bars {
		fmt.Fprintf(ui.w, "crash %d: the worker was killed with SIGKILL; restarting\n", n)
		return
	}
	name := "stats"
	if ui.truthBar != nil {
		name = "truth"
	}
	ui.setText(name, fmt.Sprintf("%s  — crash %d: SIGKILL, restarting", ui.text[name], n))
}

func (ui *progressUI) finish() {
	if !ui.bars || ui.done {
		return
	}
	ui.done = true
	for _, b := range []*mpb.Bar{ui.loadBar, ui.truthBar, ui.rowcnt, ui.stat} {
		if b != nil {
			b.SetTotal(-1, true)
		}
	}
	ui.p.Wait()
}

// stop ends the bars where they are (a run that ended early); after finish
// it does nothing.
func (ui *progressUI) stop() {
	if !ui.bars || ui.done {
		return
	}
	ui.done = true
	ui.p.Shutdown()
}
