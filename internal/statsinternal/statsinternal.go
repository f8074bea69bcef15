// Package statsinternal converts between the values of package stats and
// the machinery's snapshots they wrap, for this module's own packages:
// package lsm builds a stats.Snapshot from the tracker's Version
// (internal/ssttracker) and the live statistics' Snapshot
// (internal/livebuckets), and verification, the compaction policy, the CLI
// and the tests read the per-SST files and the buckets behind one.
//
// Package stats keeps those snapshots in unexported fields, so that no
// user of stats can reach, let alone change, what the store publishes: the
// machinery's snapshots are immutable once published, and stats exposes
// only queries. Package stats fills in Hooks when it is initialized; the
// functions take and return stats.Version and stats.Live as any, because
// this package cannot import stats, which imports it. Any other value
// panics. The values stay small (one pointer): the conversions neither
// allocate nor copy.
//
// It also names the metrics of a store (MetricDesc), which package stats
// and package lsm share.
package statsinternal

import (
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/prometheus/client_golang/prometheus"
)

// Hooks are set by package stats's init.
var Hooks struct {
	Version   func(*ssttracker.Version) any
	Live      func(*livebuckets.Snapshot) any
	VersionOf func(version any) *ssttracker.Version
	LiveOf    func(live any) *livebuckets.Snapshot
}

// Version returns v as a stats.Version (nil: the empty one).
func Version(v *ssttracker.Version) any { return Hooks.Version(v) }

// Live returns l as a stats.Live (nil: the empty one).
func Live(l *livebuckets.Snapshot) any { return Hooks.Live(l) }

// VersionOf returns the Version that version, a stats.Version, wraps (nil
// for the zero Version).
func VersionOf(version any) *ssttracker.Version { return Hooks.VersionOf(version) }

// LiveOf returns the Snapshot that live, a stats.Live, wraps (nil for the
// zero Live).
func LiveOf(live any) *livebuckets.Snapshot { return Hooks.LiveOf(live) }

// DefaultNamespace is the namespace of the metrics when their options name
// none.
const DefaultNamespace = "lsmstats"

// MetricDesc returns the descriptor of a metric under namespace (empty:
// DefaultNamespace) and subsystem, with the constant labels.
func MetricDesc(namespace string, constLabels prometheus.Labels, subsystem, name, help string, labels ...string) *prometheus.Desc {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, name), help, labels, constLabels)
}
