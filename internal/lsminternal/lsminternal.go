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
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
)

// Hooks are set by package lsm's init.
var Hooks struct {
	DB        func(store any) *pebble.DB
	PebbleDir func(store any) string
	Tracker   func(store any) *ssttracker.Tracker
}

// DB returns the Pebble database under store, an *lsm.Store.
func DB(store any) *pebble.DB { return Hooks.DB(store) }

// PebbleDir returns the directory of the Pebble database under store, an
// *lsm.Store, for tools that read its SSTs.
func PebbleDir(store any) string { return Hooks.PebbleDir(store) }

// StoreTracker returns the tracker of the physical statistics of store, an
// *lsm.Store.
func StoreTracker(store any) *ssttracker.Tracker { return Hooks.Tracker(store) }
