package main

import (
	"fmt"
	"strings"
)

// summaryWorkloads are BenchmarkBackfill's workloads in the summary's order.
var summaryWorkloads = []string{"uniform", "skew", "update-churn", "delete-churn", "tombstone-prefix", "insert-during"}

// renderSummary is README.md's one table: per workload of BenchmarkBackfill,
// the mean and largest error of each approach's raw figure against the
// truth, and the stats approach's progress CPU per checkpoint; six columns,
// so that it reads on a screen. stamp says what it was measured at. The
// details are in docs/results.md.
func renderSummary(m map[string]map[string]float64, stamp string) string {
	var b strings.Builder
	b.WriteString("\n| workload | row-count error, mean | row-count error, max | stats error, mean | stats error, max | stats CPU per checkpoint |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	rows := 0
	for _, w := range summaryWorkloads {
		rc, okRC := m["BenchmarkBackfill/workload="+w+"/approach=rowcount"]
		st, okSt := m["BenchmarkBackfill/workload="+w+"/approach=stats"]
		if !okRC && !okSt {
			continue
		}
		pp := func(x map[string]float64, ok bool, key string) string {
			if !ok {
				return "—"
			}
			return optional(x, key, "%.2f pp")
		}
		cpu := "—"
		if v, ok := st["progress-cpu-ns/barrier"]; okSt && ok {
			cpu = duration(v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", w,
			pp(rc, okRC, "err-mean-pp"), pp(rc, okRC, "err-max-pp"), pp(st, okSt, "err-mean-pp"), pp(st, okSt, "err-max-pp"), cpu)
		rows++
	}
	if rows == 0 {
		return "\nNo BenchmarkBackfill results in this run.\n\n"
	}
	b.WriteString("\nA backfill of 200,000 rows in 256 vnodes by 2 actors, a checkpoint every 2,048 snapshot rows per actor, ")
	b.WriteString("per workload (`make bench`: BenchmarkBackfill). Errors are |raw figure − truth| over every checkpoint, in percentage points. ")
	b.WriteString(stamp)
	b.WriteString(" Every figure, the storage goals and the scale, ETA and job tables: [docs/results.md](docs/results.md).\n\n")
	return b.String()
}
