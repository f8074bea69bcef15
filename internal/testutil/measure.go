package testutil

import (
	"slices"
	"testing"
)

// Median returns the median of xs (the upper one of an even count), which
// it sorts. Benchmarks on a shared machine report medians: one GC pause or
// preemption would be most of a mean of short timings.
func Median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// SweepCaches writes one byte of every 64-byte line of buf, evicting from
// the CPU caches what a timed operation would otherwise meet warm (a buf
// several times the last-level cache: 64 MiB here).
func SweepCaches(buf []byte) {
	for i := 0; i < len(buf); i += 64 {
		buf[i]++
	}
}

// BenchSize returns a benchmark's size: full, or small under -short. make
// bench runs the full sizes; make bench-smoke runs every benchmark once
// with -short, at sizes that take seconds, to show that each runs.
func BenchSize(full, small int) int {
	if testing.Short() {
		return small
	}
	return full
}
