package lsm_test

import (
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/lsmstats/lsmstats/harness/storetest"
	"github.com/lsmstats/lsmstats/lsm"
)

// TestDataDriven runs testdata/store/lsm/* (at the repository top) on the
// shared store harness (package harness/storetest, whose doc comment lists
// its commands). Every store of a file runs on the file's fault injector
// (disarmed unless a test arms it), crash drops the store without Close, and
// the white-box commands come from lsm.NewDataDrivenHooks (export_test.go):
//
//	spill                force the sync manager to spill every buffer
//	inject kinds=K1|K2 path=REGEX [skip=N] [times=N]
//	                     arm a rule of the file's fault injector: fail
//	                     operations of those kinds (faultfs.Kind) on paths
//	                     (relative to the store directory) matching REGEX,
//	                     after skip matching ones, times times (0: always)
//	disarm               remove every rule
//	faults               faults injected so far, per kind
//	raw-set [flush]      write keys through DB(), bypassing the store: one
//	                     "KEY VALUE" per line
//	raw-pebble-set       the same with Pebble alone, on a store that does
//	                     not open
//	get table=N vnode=V pk=PK
//	                     Store.Get
//	iter table=N vnode=V [lo=PK] [hi=PK]
//	                     Store.NewIter over one vnode
//	write-pk name=W epoch=E vnode=V pk=PK [row=R]
//	                     an Insert with raw pk bytes
//	physical             keys the collector counted apart (foreign,
//	                     metadata) in the live SSTs
//
// KEY, PK and VALUE are as ddBad (badinput_test.go) describes.
func TestDataDriven(t *testing.T) {
	storetest.Walk(t, "../testdata/store/lsm", func(t *testing.T, h *storetest.Harness) {
		hooks := lsm.NewDataDrivenHooks(h.Dir, h.ObjectStore)
		h.Options = func(o *lsm.Options) { o.FS = hooks.FS }
		h.Crash = hooks.Crash
		for _, name := range hooks.Commands {
			h.Commands[name] = func(t *testing.T, h *storetest.Harness, td *datadriven.TestData) string {
				return hooks.Run(t, h.Store, h.Writers, td)
			}
		}
	})
}
