//go:build !race

package backfill_test

// canonicalRows is the table size of the canonical runs; the race detector
// slows everything down about tenfold, so race builds run a tenth of it.
const canonicalRows = 200000
