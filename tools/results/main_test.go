package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRender feeds render a small benchmark output and checks the figures it
// picks: the worst case per goal (the smaller for a throughput ratio, the
// larger for a latency ratio), before → after pairs, and "—" for metrics the
// run did not produce. A later line of a benchmark adds its metrics to the
// earlier one's (the 4M scale row's solo figures).
func TestRender(t *testing.T) {
	out := `goos: linux
BenchmarkCommit/rows=1000/checked=false-2   100  22080008 ns/op  0 write-stalls  0.9311 x-of-pebble
BenchmarkCommit/rows=20000/checked=false-2   26  113508121 ns/op  2 write-stalls  0.9959 x-of-pebble
BenchmarkGet-2   1011242  2490 ns/op  1030 ns/get  1239 pebble-ns/get  0.8320 x-of-pebble
BenchmarkGC/rows=100000/workload=upd30-del30-2  19  121605086 ns/op  1.000 entries/row-after  2.479 entries/row-before
BenchmarkBackfill/workload=skew/approach=stats-2  1  0.1864 err-max-pp  0.05046 err-mean-pp  125194 progress-cpu-ns/barrier  122629 rows/s  2361 state-bytes/barrier
BenchmarkBackfill/workload=uniform/approach=stats-2  1  0.1 err-max-pp  0.05 err-mean-pp  125194 progress-cpu-ns/barrier  100000 rows/s  2361 state-bytes/barrier  0.25 x-of-raw-pebble  0.5 load-x-of-raw-pebble
BenchmarkScale/rows=4M/workload=uniform-2  1  2e9 ns/op  80000 rows/s  0.2 x-of-raw-pebble  0.6 x-of-raw-interleaved  50000 load-rows/s  0.45 load-x-of-raw-pebble  12500 backfill-ns/row  20000 backfill-cpu-ns/row  300 peak-rss-MB  310 raw-peak-rss-MB  120 cache-MB  45 closed-heap-MB  5 commit-p50-ms  40 commit-p99-ms  200 ssts  3 l0-sublevels  20 max-l0-sublevels
BenchmarkScale/rows=1M/workload=uniform-2  1  2e9 ns/op  90000 rows/s  0.21 x-of-raw-pebble
BenchmarkScale/rows=1M/workload=uniform/order=interleaved-2  1  1e9 ns/op  300000 rows/s  0.61 x-of-raw-pebble
BenchmarkScale/rows=1M/workload=update-churn/order=interleaved-2  1  1e9 ns/op  200000 rows/s  0.9 x-of-raw-pebble  1.25 x-of-raw-default  0.95 x-of-raw-interleaved  1.1 x-of-raw-interleaved-default  60000 load-rows/s  0.8 load-x-of-raw-pebble  0.7 load-x-of-raw-default  3.5 stats-share-flushed-%  4.25 stats-share-compacted-%  3.9 stats-share-%  70000 raw-default-rows/s  80000 raw-default-load-rows/s
BenchmarkETA/workload=steady-unlimited-2  1  6615339902 ns/op  53.00 checkpoints  41.51 eta-coverage-%  22.62 eta-median-err-%  34.04 eta-p90-err-%  0 eta-under-1m  88.68 plain-coverage-%  22.65 plain-median-err-%  34.03 plain-p90-err-%  0 plain-under-1m  11806 rows/s
BenchmarkETA/workload=steady-2  1  24297139041 ns/op  53.00 checkpoints  79.25 eta-coverage-%  9.744 eta-median-err-%  15.37 eta-p90-err-%  0 eta-under-1m  90 plain-coverage-%  4 plain-median-err-%  9 plain-p90-err-%  0 plain-under-1m  798.4 rows/s  99.8 limit-share-%
BenchmarkMultiUpstream/rows=1000000+20000+5000-2  1  7.5e10 ns/op  225 checkpoints  0.0017 err-mean-pp  0.0073 err-max-pp  25.7 rowcount-err-mean-pp  50.2 rowcount-err-max-pp
BenchmarkSnapshotBackfill/rows=200000+20000+5000-2  1  3e10 ns/op  45 checkpoints-snapshot  40 checkpoints-log-store  2 checkpoints-joined  0 err-mean-pp  0 err-max-pp  25 rowcount-err-mean-pp  62 rowcount-err-max-pp  19 log-pct-at-snapshot-end
BenchmarkETA/workload=crash-rescale-2  1  24297139041 ns/op  40.00 checkpoints  85 eta-coverage-%  12.5 eta-median-err-%  30 eta-p90-err-%  1 eta-under-1m  800 rows/s  100 limit-share-%
BenchmarkScale/rows=4M/workload=uniform-2  1  3e9 ns/op  900 solo-peak-rss-MB  600 solo-cache-MB  130 solo-memtable-MB  170 solo-beyond-caches-MB  7000 solo-backfill-ns/row  9000 solo-backfill-cpu-ns/row  4000 solo-load-ns/row  5000 solo-load-cpu-ns/row  60 solo-raw-beyond-caches-MB  2 solo-raw-malloc-free-MB  3000 solo-raw-backfill-ns/row  4000 solo-raw-backfill-cpu-ns/row  2500 solo-raw-load-ns/row  3500 solo-raw-load-cpu-ns/row  40 solo-settle-ns/row  0 solo-raw-settle-ns/row  0.8203 solo-total-x-of-raw
`
	path := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := parse(path)
	if err != nil {
		t.Fatal(err)
	}
	var scale strings.Builder
	renderScale(&scale, m)
	var eta strings.Builder
	renderETA(&eta, m)
	var jobs strings.Builder
	renderJobs(&jobs, m)
	table := render(m) + scale.String() + eta.String() + jobs.String()
	summary := renderSummary(m, stamp(path))
	for _, want := range []string{
		"| skew | — | — | 0.05 pp | 0.19 pp | 125.2 µs |",
		"| uniform | — | — | 0.05 pp | 0.10 pp | 125.2 µs |",
		"Measured at a commit that `" + path + "` does not record",
	} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, summary)
		}
	}
	if strings.Contains(summary, "update-churn") {
		t.Errorf("the summary shows a workload the run lacks:\n%s", summary)
	}
	if w := widestRow(summary); w > 8 {
		t.Errorf("the summary table has %d columns, more than README's 8", w)
	}
	var scaleSummary strings.Builder
	renderScaleSummary(&scaleSummary, m)
	for _, want := range []string{
		"| 4M | uniform | 0.45× | 0.20× | — | — | — | 300 MB (310 MB) |",
		"| 1M | update-churn, interleaved order | 0.80× | 0.95× (in turn) | 3.90% | — | — | — (—) |",
	} {
		if !strings.Contains(scaleSummary.String(), want) {
			t.Errorf("the README's scale table lacks %q:\n%s", want, scaleSummary.String())
		}
	}
	if w := widestRow(scaleSummary.String()); w > 8 {
		t.Errorf("the README's scale table has %d columns, more than 8", w)
	}
	if strings.Contains(render(m), "BenchmarkMultiUpstream") {
		t.Errorf("the job kinds' table is its own block, not the results block's")
	}
	if strings.Contains(render(m), "BenchmarkETA") {
		t.Errorf("the ETA table is its own block, not the results block's")
	}
	if i, j := strings.Index(table, "| 1M | uniform |"), strings.Index(table, "| 4M | uniform |"); i < 0 || j < i {
		t.Errorf("scale rows out of order:\n%s", table)
	}
	// The other snapshot order is a workload of its own, after the default's.
	if i, j := strings.Index(table, "| 4M | uniform |"), strings.Index(table, "| 1M | uniform, interleaved order | — | — | 300000 | 0.610× |"); j < 0 || j < i {
		t.Errorf("no row of the interleaved order after the vnode order's:\n%s", table)
	}
	// Two sizes: the table links the plot; one size (make bench's 1M rows
	// alone) has nothing to plot against rows, and no link.
	if !strings.Contains(table, "![plot](scale.png)") || !plottable(scalePoints(m)) {
		t.Errorf("no plot linked for two sizes:\n%s", table)
	}
	one := map[string]map[string]float64{}
	for name, x := range m {
		if !strings.Contains(name, "rows=4M") {
			one[name] = x
		}
	}
	var b1 strings.Builder
	renderScale(&b1, one)
	if strings.Contains(b1.String(), "![plot]") || plottable(scalePoints(one)) || !strings.Contains(b1.String(), "| 1M | uniform |") {
		t.Errorf("one size: a plot linked, or no table:\n%s", b1.String())
	}
	png := filepath.Join(t.TempDir(), "scale.png")
	if err := plotScale(png, scalePoints(m)); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() == 0 {
		t.Fatalf("no plot: %v", err)
	}
	for _, want := range []string{
		"| commit throughput, unchecked writers (lsm) | ≥ 0.8× Pebble | 0.93× |",
		"| write stalls during the commit benchmarks | 0 | 2 |",
		"| point read latency (lsm) | ≤ 1.3× Pebble | 0.83× |",
		"| physical entries per live row, before → after GC + compaction | → 1.000 | 2.479 → 1.000 |",
		"| vnode scan rows/s (lsm) | ≥ 0.7× Pebble | — |",
		"| skew | stats | 0.050 | 0.186 | 125.2 µs | 2361 | 122629 | — | — |",
		"| uniform | stats | 0.050 | 0.100 | 125.2 µs | 2361 | 100000 | 0.250× | 0.500× |",
		"| 1M | uniform | — | — | 90000 | 0.210× | — | — |",
		// Against raw Pebble with the store's options / Pebble's defaults,
		// and the statistics' share of the bytes written.
		"| 1M | update-churn, interleaved order | 60000 | 0.800× / 0.700× | 200000 | 0.900× / 1.250× | 0.950× / 1.100× | 3.50% / 4.25% (3.90%) |",
		"| 4M | uniform | 50000 | 0.450× | 80000 | 0.200× | 0.600× | — | 12.5 µs / 20.0 µs | — / — | 7.0 µs / 9.0 µs, 4.0 µs / 5.0 µs (3.0 µs / 4.0 µs, 2.5 µs / 3.5 µs); settle 40 ns (0 ns); whole job 0.82× raw Pebble alone |",
		"| 300 MB (310 MB) | 900 MB = 600 + 130 + 170 [60 (2)] | 120 MB / 45 MB |",
		"| 5 ms / 40 ms | 200 | 3 (20) |",
		"| skew | stats | 0.050 | 0.186 | 125.2 µs | 2361 | 122629 |",
		"| steady | 798 (100%) | 53 | backfill.ETA (the job's) | 9.7% | 15.4% | 79% | 0 | no: coverage |",
		"| steady | 798 (100%) | 53 | backfill.PlainETA | 4.0% | 9.0% | 90% | 0 | yes |",
		"| crash-rescale | 800 (100%) | 40 | backfill.ETA (the job's) | 12.5% | 30.0% | 85% | 1 | no: median, p90, < 1 min |",
		"| steady-unlimited | 11806 | 53 | backfill.PlainETA | 22.6% | 34.0% | 89% | 0 | — (no limit) |",
		"| several upstreams (BenchmarkMultiUpstream) | 1M + 20k + 5k | 225 | — | 0.0017 | 0.0073 | 25.7 | 50.2 | yes |",
		// A log store under 20% of the snapshot misses the goal.
		"| snapshot backfill (BenchmarkSnapshotBackfill) | 200k + 20k + 5k | 87 | 19% | 0.0000 | 0.0000 | 25.0 | 62.0 | no |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// TestBlocks: a scale-only run updates the scale block and leaves the
// results block alone; a README without scale markers is an error naming
// them.
func TestBlocks(t *testing.T) {
	readme := "intro\n" + startMarker + "\nold results\n" + endMarker + "\n" + scaleStartMarker + "\nold scale\n" + scaleEndMarker + "\n"
	m := map[string]map[string]float64{"BenchmarkScale/rows=1M/workload=uniform": {"rows/s": 1000}}
	if hasBench(m) {
		t.Fatal("a scale-only run counted as a make bench run")
	}
	var scale strings.Builder
	renderScale(&scale, m)
	got, err := replaceBlock(readme, scaleStartMarker, scaleEndMarker, scale.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "\nold results\n") || strings.Contains(got, "old scale") || !strings.Contains(got, "| 1M | uniform | — | — | 1000 |") {
		t.Errorf("blocks not replaced as expected:\n%s", got)
	}
	m["BenchmarkGet"] = map[string]float64{"ns/get": 1}
	if !hasBench(m) {
		t.Error("a make bench run not recognised")
	}
	if _, err := replaceBlock("no markers", scaleStartMarker, scaleEndMarker, "x"); err == nil || !strings.Contains(err.Error(), "scale:start") {
		t.Errorf("missing markers: %v", err)
	}
}

// TestStamp: a block says the commit its output's commit line records, and
// says so when the output records none.
func TestStamp(t *testing.T) {
	dir := t.TempDir()
	with := filepath.Join(dir, "with.txt")
	without := filepath.Join(dir, "without.txt")
	if err := os.WriteFile(with, []byte("commit: 0123456789abcdef0123456789abcdef01234567 (with uncommitted changes)\ngoos: linux\nBenchmarkGet-2 1 5 ns/op\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(without, []byte("goos: linux\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := stamp(with), "Measured at commit `0123456789ab` (with uncommitted changes) (`"+with+"`)."; got != want {
		t.Errorf("stamp = %q, want %q", got, want)
	}
	// A cell run again and appended: both commits, the first once.
	appended := filepath.Join(dir, "appended.txt")
	if err := os.WriteFile(appended, []byte("commit: 0123456789abcdef0123456789abcdef01234567\nBenchmarkGet-2 1 5 ns/op\ncommit: 0123456789abcdef0123456789abcdef01234567\ncommit: fedcba9876543210fedcba9876543210fedcba98\nBenchmarkGet-2 1 6 ns/op\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, want := stamp(appended), "Measured at commits `0123456789ab` and `fedcba987654` (`"+appended+"`; each benchmark at the commit line above it)."; got != want {
		t.Errorf("stamp = %q, want %q", got, want)
	}
	if got := stamp(without); !strings.Contains(got, "does not record") {
		t.Errorf("stamp of an output without a commit line = %q", got)
	}
	if got := stamp(filepath.Join(dir, "missing.txt")); !strings.Contains(got, "does not record") {
		t.Errorf("stamp of a missing output = %q", got)
	}
}

// widestRow returns the most columns of any markdown table row in s (a
// line that starts with "|"; "\|" is no separator).
func widestRow(s string) int {
	widest := 0
	inCode := false
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "|") {
			continue
		}
		cells := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|") - 1
		widest = max(widest, cells)
	}
	return widest
}

// TestREADME holds README.md to what make results keeps it: its first
// screen (60 lines) has the picture, the two commands and the summary
// table; no table wider than 8 columns; the detailed tables' blocks are in
// docs/results.md, not in README.md.
func TestREADME(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	lines := strings.Split(readme, "\n")
	first := strings.Join(lines[:min(60, len(lines))], "\n")
	for _, want := range []string{"docs/progress.png", "make demo", "make test", summaryStartMarker, summaryEndMarker, "| workload |"} {
		if !strings.Contains(first, want) {
			t.Errorf("README.md's first 60 lines lack %q", want)
		}
	}
	if w := widestRow(readme); w > 8 {
		t.Errorf("README.md has a table of %d columns, more than 8", w)
	}
	for _, m := range []string{scaleSummaryStartMarker, scaleSummaryEndMarker} {
		if !strings.Contains(readme, m) {
			t.Errorf("README.md lacks %q, the block of its scale table", m)
		}
	}
	if widestRow("| a | b \\| c |\n|---|---|\n") != 2 {
		t.Error("widestRow counts an escaped | as a separator")
	}
	r, err := os.ReadFile("../../docs/results.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{startMarker, endMarker, scaleStartMarker, scaleEndMarker, etaStartMarker, etaEndMarker, jobsStartMarker, jobsEndMarker} {
		if strings.Contains(readme, m) {
			t.Errorf("README.md holds %q, whose table lives in docs/results.md", m)
		}
		if !strings.Contains(string(r), m) {
			t.Errorf("docs/results.md lacks %q", m)
		}
	}
}
