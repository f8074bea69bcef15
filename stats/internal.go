package stats

import (
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
)

// The store builds Versions and Lives, and this module's tools read the
// machinery behind them, through internal/statsinternal (see the package
// documentation): nothing outside the module can.
func init() {
	h := &statsinternal.Hooks
	h.Version = func(v *ssttracker.Version) any { return Version{v} }
	h.Live = func(l *livebuckets.Snapshot) any { return Live{l} }
	h.VersionOf = func(v any) *ssttracker.Version { return v.(Version).v }
	h.LiveOf = func(l any) *livebuckets.Snapshot { return l.(Live).s }
}
