// Package lsminternal reaches what package lsm keeps out of its API, for
// this module's tests, benchmarks and tools: the Pebble database under a
// store and its directory, and the tracker of its physical statistics.
// None of it is a user's business: writing to the Pebble database directly
// bypasses the store's invariants (the tests do it to corrupt a store, to
// force a flush or a compaction, or to write what a later version would),
// and the tracker and the SST files are the statistics' machinery, which
// the benchmarks measure. What a user needs is public in lsm: the store's
// counters (Store.Metrics), Pebble's metrics (Store.PebbleMetrics) and the
// Pebble options a store opens with (Options.PebbleOptions).
//
// Package lsm fills in Hooks when it is initialized. The functions take a
// *lsm.Store as any, because this package cannot import lsm, which imports
// it; any other value panics.
package lsminternal

import (
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/keystats"
)

// Hooks are set by package lsm's init.
var Hooks struct {
	DB        func(store any) *pebble.DB
	PebbleDir func(store any) string
	Metrics   func(store any) Metrics
	Tracker   func(store any) *keystats.Tracker
}

// DB returns the Pebble database under store, an *lsm.Store.
func DB(store any) *pebble.DB { return Hooks.DB(store) }

// PebbleDir returns the directory of the Pebble database under store, an
// *lsm.Store, for tools that read its SSTs.
func PebbleDir(store any) string { return Hooks.PebbleDir(store) }

// StoreMetrics returns the counters of store, an *lsm.Store: its
// Store.Metrics, for internal/keystats's tests until they call that.
func StoreMetrics(store any) Metrics { return Hooks.Metrics(store) }

// StoreTracker returns the tracker of the physical statistics of store, an
// *lsm.Store.
func StoreTracker(store any) *keystats.Tracker { return Hooks.Tracker(store) }

// Metrics has the fields of lsm.Metrics, which lsm converts to it (so the
// compiler checks that the two stay alike); see lsm.Metrics for what each
// counts.
type Metrics struct {
	Commits, Spills, SpilledBytes                                                int64
	CommitStalls, CommitStallsAbandoned                                          int64
	CommitStallTime                                                              time.Duration
	PebbleWriteStalls                                                            int64
	BufferedBytes                                                                int64
	BucketScans, BucketScanRows                                                  int64
	Corruptions                                                                  int64
	L0Sublevels                                                                  int
	L0Files                                                                      int64
	GCPasses, GCExamined, GCDeleted, GCDeletedBytes, GCIngestions, GCCompactions int64
}
