package stats_test

import (
	"slices"
	"testing"

	"github.com/lsmstats/lsmstats/harness/storetest"
)

// TestStoreDataDriven runs testdata/store/stats/* (at the repository top): the
// statistics of a real store (package lsm on Pebble) after writes, commits,
// flushes and manual compactions, in the spirit of Pebble's
// testdata/table_stats. The commands are those of the shared store harness
// (package harness/storetest); the files mostly use stats full, estimate,
// verify full, flush, compact all and singledel.
//
// After every commit the physical statistics must describe Pebble's live
// SSTs (when automatic compactions are off nothing else changes the files);
// after flush and compact all the harness waits until they do. Nothing
// printed depends on wall time, file numbers or map order.
func TestStoreDataDriven(t *testing.T) {
	storetest.Walk(t, "../testdata/store/stats", func(t *testing.T, h *storetest.Harness) {
		h.AfterCommit = func(t *testing.T, h *storetest.Harness) {
			if got, want := h.StatsFiles(t); !slices.Equal(got, want) && !h.Compactions() {
				t.Fatalf("after commit %d the statistics describe files %v, Pebble has %v",
					h.Store.CommittedEpoch(), got, want)
			}
		}
	})
}
