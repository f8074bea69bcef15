package main

import (
	"fmt"
	"image/color"
	"os"
	"sort"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// scalePrefix names BenchmarkScale's sub-benchmarks:
// BenchmarkScale/rows=4M/workload=uniform, and .../order=interleaved for
// the snapshot order that is not the default (shown as "uniform,
// interleaved order").
const scalePrefix = "BenchmarkScale/"

// scalePoint is one sub-benchmark of BenchmarkScale.
type scalePoint struct {
	rows     float64
	sizeName string
	workload string
	m        map[string]float64
}

// scalePoints returns BenchmarkScale's sub-benchmarks by workload, then
// rows.
func scalePoints(m map[string]map[string]float64) []scalePoint {
	var out []scalePoint
	for name, x := range m {
		if !strings.HasPrefix(name, scalePrefix) {
			continue
		}
		var pt scalePoint
		order := "" // the default (vnode) order has no part
		for _, part := range strings.Split(strings.TrimPrefix(name, scalePrefix), "/") {
			if v, ok := strings.CutPrefix(part, "rows="); ok {
				pt.sizeName, pt.rows = v, sizeValue(v)
			}
			if v, ok := strings.CutPrefix(part, "workload="); ok {
				pt.workload = v
			}
			if v, ok := strings.CutPrefix(part, "order="); ok {
				order = ", " + v + " order"
			}
		}
		if pt.workload != "" {
			pt.workload += order
		}
		if pt.rows > 0 && pt.workload != "" {
			pt.m = x
			out = append(out, pt)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].workload != out[j].workload {
			return workloadRank(out[i].workload) < workloadRank(out[j].workload)
		}
		return out[i].rows < out[j].rows
	})
	return out
}

// workloadRank puts the workload without churn first.
func workloadRank(w string) string {
	if w == "uniform" {
		return ""
	}
	return w
}

// sizeValue parses 1M, 200k or 5000.
func sizeValue(s string) float64 {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	}
	var v float64
	if _, err := fmt.Sscan(s, &v); err != nil {
		return 0
	}
	return v * mult
}

// plottable reports whether pts span more than one table size: a plot
// against rows of a single size (make bench's 1M rows, without a make scale
// output) shows nothing of how the costs grow.
func plottable(pts []scalePoint) bool {
	for _, p := range pts {
		if p.rows != pts[0].rows {
			return true
		}
	}
	return false
}

// renderScale writes the scale table: one row per size and workload.
func renderScale(b *strings.Builder, m map[string]map[string]float64) {
	pts := scalePoints(m)
	if len(pts) == 0 {
		return
	}
	b.WriteString("Scale (`make scale`: BenchmarkScale, the CLI's job — 256 vnodes, 2 actors, a checkpoint every 2,048 rows per actor, the stats approach — then the raw-Pebble pipelines on the same rows in the same process; the ratios are of one run; per-row costs and memory are the store's; a workload marked \"interleaved order\" ran with `--snapshot-order interleaved`, the others in the default vnode order; the first × raw is against raw Pebble scanning in pk order, the second (the interleaved order's) against raw Pebble reading the vnodes in turn; each × raw is against raw Pebble with the store's Pebble options, then, after the slash, with Pebble's default options; the statistics' share is the bytes of the metadata rows (the live statistics' buckets and the store's few other rows) and of the SST payloads over the bytes the store's Pebble wrote into SSTs by flushes, by compactions, and by both; \"alone\" is a child process holding only a store and the job, on the uniform workload's rows (bench/solo_test.go: no workload model, glibc's malloc limited to one arena): its cost per row, and its peak RSS over the job and a read of both tables; \"raw Pebble alone\" a child doing the same load, scan-and-write and read on raw Pebble with the store's Pebble options, the same cache and memtables")
	if plottable(pts) {
		b.WriteString("; ![plot](scale.png)")
	}
	b.WriteString("):\n\n")
	b.WriteString("| rows | workload | load rows/s | × raw | snapshot rows/s | × raw | × raw, vnodes in turn | statistics' share of bytes flushed / compacted (both) | backfill wall / CPU per row | load wall / CPU per row | alone: backfill, load wall / CPU per row (raw Pebble alone); settle after it; whole job × raw | compacted per backfill row (raw in turn) | peak RSS (raw) | alone: peak RSS = block cache + memtables + the rest (of which malloc's free memory) [raw Pebble alone: the rest] | block cache / Go heap of the store and job | stats heap (physical + live) | payload in SSTs / held again by readers | progress CPU per checkpoint | refresh per changed file: probe / whole run (listings) | a listing of the SSTs | commit p50 / p99 | SSTs | L0 sublevels (max) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range pts {
		x := p.m
		f := func(key, format string) string { return optional(x, key, format) }
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s (%s) | %s (%s) | %s | %s / %s | %s (%s + %s) | %s / %s | %s | %s | %s | %s / %s | %s | %s (%s) |\n",
			p.sizeName, p.workload,
			f("load-rows/s", "%.0f"), ratios(x, "load-x-of-raw-pebble", "load-x-of-raw-default"),
			f("rows/s", "%.0f"), ratios(x, "x-of-raw-pebble", "x-of-raw-default"),
			ratios(x, "x-of-raw-interleaved", "x-of-raw-interleaved-default"), statsShare(x),
			dur(x, "backfill-ns/row"), dur(x, "backfill-cpu-ns/row"), dur(x, "load-ns/row"), dur(x, "load-cpu-ns/row"), soloPerRow(x),
			f("backfill-compact-B/row", "%.0f B"), f("raw-interleaved-compact-B/row", "%.0f B"),
			f("peak-rss-MB", "%.0f MB"), f("raw-peak-rss-MB", "%.0f MB"), solo(x),
			f("cache-MB", "%.0f MB"), f("closed-heap-MB", "%.0f MB"),
			f("stats-heap-MB", "%.1f MB"), f("physical-heap-MB", "%.1f"), f("live-heap-MB", "%.1f"),
			f("payload-MB", "%.2f MB"), f("reader-payload-MB", "%.2f MB"),
			dur(x, "progress-cpu-ns/barrier"), runRefresh(x), dur(x, "listing-ns"),
			f("commit-p50-ms", "%.0f ms"), f("commit-p99-ms", "%.0f ms"),
			f("ssts", "%.0f"), f("l0-sublevels", "%.0f"), f("max-l0-sublevels", "%.0f"))
	}
	b.WriteString("\n")
}

// ratios is a ratio to raw Pebble with the store's options, and after a
// slash, when the run measured it, to raw Pebble with Pebble's defaults.
func ratios(x map[string]float64, key, defaultsKey string) string {
	v := optional(x, key, "%.3f×")
	if d, ok := x[defaultsKey]; ok {
		v += fmt.Sprintf(" / %.3f×", d)
	}
	return v
}

// statsShare is the statistics' share of the bytes flushed and compacted,
// and of both.
func statsShare(x map[string]float64) string {
	both, ok := x["stats-share-%"]
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.2f%% / %.2f%% (%.2f%%)", x["stats-share-flushed-%"], x["stats-share-compacted-%"], both)
}

// solo is the solo child's memory (bench/solo_test.go): its peak RSS as the
// sum of the block cache, the memtables and the rest, and of the rest, when
// the run measured it, the free memory malloc kept at the end.
func solo(x map[string]float64) string {
	peak, ok := x["solo-peak-rss-MB"]
	if !ok {
		return "—"
	}
	v := fmt.Sprintf("%.0f MB = %.0f + %.0f + %.0f", peak, x["solo-cache-MB"], x["solo-memtable-MB"], x["solo-beyond-caches-MB"])
	if free, ok := x["solo-malloc-free-MB"]; ok && free > 0 {
		v += fmt.Sprintf(" (%.0f free in malloc)", free)
	}
	if raw, ok := x["solo-raw-beyond-caches-MB"]; ok {
		v += fmt.Sprintf(" [%.0f", raw)
		if free := x["solo-raw-malloc-free-MB"]; free > 0 {
			v += fmt.Sprintf(" (%.0f)", free)
		}
		v += "]"
	}
	return v
}

// soloPerRow is the solo child's wall and CPU per row of the backfill and
// of the load.
func soloPerRow(x map[string]float64) string {
	if _, ok := x["solo-backfill-ns/row"]; !ok {
		return "—"
	}
	v := fmt.Sprintf("%s / %s, %s / %s", dur(x, "solo-backfill-ns/row"), dur(x, "solo-backfill-cpu-ns/row"),
		dur(x, "solo-load-ns/row"), dur(x, "solo-load-cpu-ns/row"))
	if _, ok := x["solo-raw-backfill-ns/row"]; ok {
		v += fmt.Sprintf(" (%s / %s, %s / %s)", dur(x, "solo-raw-backfill-ns/row"), dur(x, "solo-raw-backfill-cpu-ns/row"),
			dur(x, "solo-raw-load-ns/row"), dur(x, "solo-raw-load-cpu-ns/row"))
	}
	// Runs since the children measure the compactions a job leaves
	// behind: that settle per row, and the whole job against raw Pebble's.
	if _, ok := x["solo-settle-ns/row"]; ok {
		v += "; settle " + dur(x, "solo-settle-ns/row")
		if _, ok := x["solo-raw-settle-ns/row"]; ok {
			v += " (" + dur(x, "solo-raw-settle-ns/row") + ")"
		}
	}
	if total, ok := x["solo-total-x-of-raw"]; ok {
		v += fmt.Sprintf("; whole job %.2f× raw Pebble alone", total)
	}
	return v
}

// runRefresh is the refresh time per changed file of the probe and of the
// whole run, with the refreshes of the run that listed the SSTs (runs
// before the tracker followed Pebble's events have the probe's figure
// only, and it is beyond a listing).
func runRefresh(x map[string]float64) string {
	if _, ok := x["run-refresh-ns/changed-file"]; !ok {
		return dur(x, "refresh-ns/changed-file") + " + a listing"
	}
	return fmt.Sprintf("%s / %s (%.0f)", dur(x, "refresh-ns/changed-file"), dur(x, "run-refresh-ns/changed-file"), x["run-refresh-listings"])
}

func dur(x map[string]float64, key string) string {
	v, ok := x[key]
	if !ok {
		return "—"
	}
	return duration(v)
}

// series is one line of a scale panel: a metric of one workload, scaled.
type series struct {
	label, key string
	scale      float64
	color      color.RGBA
}

var (
	blue   = color.RGBA{G: 119, B: 187, A: 255}
	red    = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	green  = color.RGBA{R: 44, G: 160, B: 44, A: 255}
	orange = color.RGBA{R: 255, G: 127, B: 14, A: 255}
	grey   = color.RGBA{R: 110, G: 110, B: 110, A: 255}
	purple = color.RGBA{R: 148, G: 103, B: 189, A: 255}
	black  = color.RGBA{A: 255}
	brown  = color.RGBA{R: 140, G: 86, B: 75, A: 255}
)

// plotScale draws the scale table against rows: six panels, one line per
// metric and workload (a dash pattern per workload), rows on a log scale.
func plotScale(path string, pts []scalePoint) error {
	panels := []struct {
		title, y string
		lines    []series
	}{
		{"Throughput", "thousand rows/s", []series{
			{"snapshot", "rows/s", 1e-3, blue}, {"raw snapshot", "raw-rows/s", 1e-3, grey},
			{"raw snapshot, vnodes in turn", "raw-interleaved-rows/s", 1e-3, green},
			{"raw snapshot, Pebble's defaults", "raw-default-rows/s", 1e-3, brown},
			{"load", "load-rows/s", 1e-3, red}, {"raw load", "raw-load-rows/s", 1e-3, orange},
			{"raw load, Pebble's defaults", "raw-default-load-rows/s", 1e-3, purple}}},
		{"Cost per row (the store)", "µs per row", []series{
			{"backfill wall", "backfill-ns/row", 1e-3, blue}, {"backfill CPU", "backfill-cpu-ns/row", 1e-3, green},
			{"load wall", "load-ns/row", 1e-3, red}, {"load CPU", "load-cpu-ns/row", 1e-3, orange},
			{"alone: backfill wall", "solo-backfill-ns/row", 1e-3, purple}, {"alone: backfill CPU", "solo-backfill-cpu-ns/row", 1e-3, black}}},
		{"Memory", "MB", []series{
			{"peak RSS", "peak-rss-MB", 1, blue}, {"raw peak RSS", "raw-peak-rss-MB", 1, grey},
			{"block cache", "cache-MB", 1, green}, {"Go heap of the store and job", "closed-heap-MB", 1, purple},
			{"stats heap", "stats-heap-MB", 1, red}, {"payload held by readers", "reader-payload-MB", 1, orange},
			{"alone: RSS beyond cache and memtables", "solo-beyond-caches-MB", 1, black},
			{"raw Pebble alone: the same", "solo-raw-beyond-caches-MB", 1, brown}}},
		{"Statistics per checkpoint", "µs", []series{
			{"progress CPU per checkpoint", "progress-cpu-ns/barrier", 1e-3, blue},
			{"refresh per changed file (probe)", "refresh-ns/changed-file", 1e-3, red},
			{"refresh per changed file (whole run)", "run-refresh-ns/changed-file", 1e-3, purple},
			{"a listing of the SSTs", "listing-ns", 1e-3, orange}}},
		{"Commit latency", "ms", []series{
			{"p50", "commit-p50-ms", 1, blue}, {"p99", "commit-p99-ms", 1, red}}},
		{"LSM shape at the end", "count", []series{
			{"SSTs", "ssts", 1, blue}, {"L0 sublevels (max seen)", "max-l0-sublevels", 1, red}}},
	}
	// One dash pattern per workload, in the table's order (pts is sorted):
	// solid for the first (uniform), then dotted, dashed, dash-dotted.
	patterns := [][]vg.Length{nil, {vg.Points(1), vg.Points(2)}, {vg.Points(4), vg.Points(3)},
		{vg.Points(6), vg.Points(2), vg.Points(1), vg.Points(2)}, {vg.Points(8), vg.Points(4)}}
	dashes := map[string][]vg.Length{}
	var workloads []string
	for _, p := range pts {
		if _, ok := dashes[p.workload]; !ok {
			dashes[p.workload] = patterns[min(len(workloads), len(patterns)-1)]
			workloads = append(workloads, p.workload)
		}
	}
	const cols = 2
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i := range grid {
		grid[i] = make([]*plot.Plot, cols)
	}
	for i, panel := range panels {
		p := plot.New()
		p.Title.Text = panel.title
		p.X.Label.Text = "rows"
		p.Y.Label.Text = panel.y
		// A log scale needs positive bounds even in a panel with no data.
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = sizeTicks(pts)
		p.X.Min, p.X.Max = pts[0].rows, pts[0].rows
		for _, pt := range pts {
			p.X.Min, p.X.Max = min(p.X.Min, pt.rows), max(p.X.Max, pt.rows)
		}
		p.X.Min, p.X.Max = p.X.Min/1.2, p.X.Max*1.2
		p.Add(plotter.NewGrid())
		for _, s := range panel.lines {
			for _, w := range workloads {
				var xy plotter.XYs
				for _, pt := range pts {
					if v, ok := pt.m[s.key]; ok && pt.workload == w {
						xy = append(xy, plotter.XY{X: pt.rows, Y: v * s.scale})
					}
				}
				if len(xy) == 0 {
					continue
				}
				l, pointsOf, err := plotter.NewLinePoints(xy)
				if err != nil {
					return err
				}
				l.Color, pointsOf.Color = s.color, s.color
				l.Width = vg.Points(1.5)
				label := s.label
				l.Dashes = dashes[w]
				if w != workloads[0] {
					label += " (" + w + ")"
				}
				p.Add(l, pointsOf)
				p.Legend.Add(label, l)
			}
		}
		p.Y.Min = 0
		p.Y.Max = max(p.Y.Max, 1)
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(7)
		grid[i/cols][i%cols] = p
	}
	for i := len(panels); i < rows*cols; i++ {
		grid[i/cols][i%cols] = plot.New()
	}
	img := vgimg.New(12*vg.Inch, vg.Length(rows)*4*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, t, dc)
	for j := range grid {
		for i := range grid[j] {
			grid[j][i].Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// sizeTicks marks the sizes measured.
func sizeTicks(pts []scalePoint) plot.Ticker {
	seen := map[float64]string{}
	for _, p := range pts {
		seen[p.rows] = p.sizeName
	}
	var ticks []plot.Tick
	for v, name := range seen {
		ticks = append(ticks, plot.Tick{Value: v, Label: name})
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Value < ticks[j].Value })
	return plot.ConstantTicks(ticks)
}

// renderScaleSummary writes the README's scale table, eight columns of
// docs/results.md's: per size, workload and order, the load and the
// backfill against raw Pebble with the store's options (the interleaved
// order's against raw Pebble reading the vnodes in turn), the statistics'
// share of the bytes Pebble wrote, the stats error's maximum, the progress
// CPU per checkpoint and the peak RSS.
func renderScaleSummary(b *strings.Builder, m map[string]map[string]float64) {
	pts := scalePoints(m)
	if len(pts) == 0 {
		return
	}
	b.WriteString("| rows | workload | load × raw | backfill × raw | statistics' share of bytes written | stats error, max | progress CPU per checkpoint | peak RSS (raw) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range pts {
		x := p.m
		f := func(key, format string) string { return optional(x, key, format) }
		backfill := f("x-of-raw-pebble", "%.2f×")
		if strings.HasSuffix(p.workload, "interleaved order") {
			backfill = f("x-of-raw-interleaved", "%.2f× (in turn)")
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s (%s) |\n",
			p.sizeName, p.workload, f("load-x-of-raw-pebble", "%.2f×"), backfill,
			f("stats-share-%", "%.2f%%"), f("stats-err-max-pp", "%.3f pp"),
			dur(x, "progress-cpu-ns/barrier"), f("peak-rss-MB", "%.0f MB"), f("raw-peak-rss-MB", "%.0f MB"))
	}
	b.WriteString("\n")
}
