//go:build race

package backfill_test

const canonicalRows = 20000
