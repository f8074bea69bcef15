// Package lsminternal reaches what package lsm keeps out of its API, for
// this module's CLI, benchmarks and tests: the Pebble database under a
// store and its directory, the Pebble options a store opens with (for a
// comparison with raw Pebble doing the same work), and the store's
// operational counters. None of it is a user's business: writing to the
// Pebble database directly bypasses the store's invariants, and the
// counters describe the implementation (spills, stalls, bucket scans).
//
// Package lsm fills in Hooks when it is initialized. The functions take a
// *lsm.Store (and PebbleOptions an *lsm.Options) as any, because this
// package cannot import lsm, which imports it; any other value panics.
package lsminternal

import (
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
)

// Hooks are set by package lsm's init.
var Hooks struct {
	DB            func(store any) *pebble.DB
	PebbleDir     func(store any) string
	PebbleOptions func(opts any) *pebble.Options
	Metrics       func(store any) Metrics
	GCMetrics     func(store any) GCMetrics
	Tracker       func(store any) *ssttracker.Tracker
}

// DB returns the Pebble database under store, an *lsm.Store.
func DB(store any) *pebble.DB { return Hooks.DB(store) }

// PebbleDir returns the directory of the Pebble database under store, an
// *lsm.Store, for tools that read its SSTs.
func PebbleDir(store any) string { return Hooks.PebbleDir(store) }

// PebbleOptions returns the Pebble options of a store opened with opts, an
// *lsm.Options (nil: the defaults), Options.Pebble applied, without
// the store's event listeners: what a comparison with raw Pebble doing the
// same work opens its database with. Each call returns new options (and,
// with CacheSize, a block cache of its own when opened).
func PebbleOptions(opts any) *pebble.Options { return Hooks.PebbleOptions(opts) }

// StoreMetrics returns the counters of store, an *lsm.Store.
func StoreMetrics(store any) Metrics { return Hooks.Metrics(store) }

// StoreGCMetrics returns the cumulative GC counters of store, an
// *lsm.Store.
func StoreGCMetrics(store any) GCMetrics { return Hooks.GCMetrics(store) }

// StoreTracker returns the tracker of the physical statistics of store, an
// *lsm.Store.
func StoreTracker(store any) *ssttracker.Tracker { return Hooks.Tracker(store) }

// Metrics are a store's counters.
type Metrics struct {
	Commits, Spills, SpilledBytes int64
	// CommitStalls counts the commits and GC batches that found L0 at
	// Options.L0StopSublevels (none while automatic compactions are off:
	// nothing would drain L0), and CommitStallTime their total wait.
	// CommitStallsAbandoned counts those that went on with L0 still deep:
	// compactions failing, none running (then later ones do not wait until
	// one succeeds again), or Options.L0StallLimit.
	CommitStalls, CommitStallsAbandoned int64
	CommitStallTime                     time.Duration
	// PebbleWriteStalls counts Pebble's own write stalls (memtable writes).
	PebbleWriteStalls int64
	// BufferedBytes is the memory held by writers' buffers now.
	BufferedBytes int64
	// BucketScans and BucketScanRows count the scans of live-statistics
	// buckets (splits of buckets that grew too big, recalibrations) and the
	// rows they read.
	BucketScans, BucketScanRows int64
	// Corruptions counts the corrupt blocks Pebble met (its DataCorruption
	// events): each read that met one returned an error naming the file.
	Corruptions int64
	L0Sublevels int
	L0Files     int64
}

// GCMetrics are a store's cumulative GC counters.
type GCMetrics struct {
	Passes, Examined, Deleted, DeletedBytes, Ingestions, Compactions int64
}
