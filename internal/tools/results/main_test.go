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
// run did not produce.
func TestRender(t *testing.T) {
	out := `goos: linux
BenchmarkCommit/rows=1000/checked=false-2   100  22080008 ns/op  0 write-stalls  0.9311 x-of-pebble
BenchmarkCommit/rows=20000/checked=false-2   26  113508121 ns/op  2 write-stalls  0.9959 x-of-pebble
BenchmarkGet-2   1011242  2490 ns/op  1030 ns/get  1239 pebble-ns/get  0.8320 x-of-pebble
BenchmarkGC/rows=100000/workload=upd30-del30-2  19  121605086 ns/op  1.000 entries/row-after  2.479 entries/row-before
BenchmarkBackfill/workload=skew/approach=stats-2  1  0.1864 err-max-pp  0.05046 err-mean-pp  125194 progress-cpu-ns/barrier  122629 rows/s  2361 state-bytes/barrier
BenchmarkETA/workload=steady-2  1  24297139041 ns/op  53.00 checkpoints  79.25 eta-coverage-%  9.744 eta-median-err-%  15.37 eta-p90-err-%
BenchmarkETA/workload=crash-rescale-2  1  24297139041 ns/op  40.00 checkpoints  85 eta-coverage-%  12.5 eta-median-err-%  30 eta-p90-err-%
`
	path := filepath.Join(t.TempDir(), "bench.txt")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := parse(path)
	if err != nil {
		t.Fatal(err)
	}
	table := render(m)
	for _, want := range []string{
		"| commit throughput, unchecked writers (lsm) | ≥ 0.8× Pebble | 0.93× |",
		"| write stalls during the commit benchmarks | 0 | 2 |",
		"| point read latency (lsm) | ≤ 1.3× Pebble | 0.83× |",
		"| physical entries per live row, before → after GC + compaction | → 1.000 | 2.479 → 1.000 |",
		"| vnode scan rows/s (lsm) | ≥ 0.7× Pebble | — |",
		"| skew | stats | 0.050 | 0.186 | 125.2 µs | 2361 | 122629 |",
		"| steady | 53 | 9.7% | 15.4% | 79% | no: coverage |",
		"| crash-rescale | 40 | 12.5% | 30.0% | 85% | no: median, p90 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}
