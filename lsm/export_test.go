package lsm

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// DataDrivenHooks are the white-box parts of TestDataDriven (package
// lsm_test, on the shared harness of harness/storetest, which package lsm's
// own tests cannot import): the file's fault injector, a crash without
// Close, and the commands that need the package's internals.
type DataDrivenHooks struct {
	// FS is the file system of every store of the file: the file's fault
	// injector, disarmed unless a test arms it.
	FS vfs.FS
	// Crash drops a store the way a SIGKILL would: no Close. Pebble's files
	// stay consistent since every commit synced.
	Crash func(s *Store)
	// Commands are the names Run answers.
	Commands []string
	// Run runs one of Commands on the open store and the harness's writers.
	Run func(t *testing.T, s *Store, writers map[string]*Writer, td *datadriven.TestData) string
}

// NewDataDrivenHooks returns the hooks of one file whose store lives in dir,
// with its SSTs in obj (nil: on local disk).
// The commands:
//
//	spill                force the sync manager to spill every buffer
//	inject, disarm, faults
//	                     fault injection: see ddFaults (faults_test.go)
//	raw-pebble-set, raw-set, get, iter, write-pk, physical
//	                     bad input: see ddBad (badinput_test.go)
func NewDataDrivenHooks(dir string, obj *objstore.StoreOptions) DataDrivenHooks {
	faults := &ddFaults{f: newFaultInjector(dir, 1)}
	bad := &ddBad{dir: dir, obj: obj}
	return DataDrivenHooks{
		FS:    faults.f.fs(),
		Crash: crashForTest,
		Commands: []string{"spill", "inject", "disarm", "faults",
			"raw-pebble-set", "raw-set", "get", "iter", "write-pk", "physical"},
		Run: func(t *testing.T, s *Store, writers map[string]*Writer, td *datadriven.TestData) string {
			if td.Cmd == "spill" {
				n, err := s.spillAll()
				return errOr(err, fmt.Sprintf("spilled %d buffers", n))
			}
			if out, ok := faults.run(t, td); ok {
				return out
			}
			if out, ok := bad.run(t, s, writers, td); ok {
				return out
			}
			t.Fatalf("unknown command %q", td.Cmd)
			return ""
		},
	}
}

func errOr(err error, ok string) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return ok
}

func argString(t *testing.T, td *datadriven.TestData, key string) string {
	var v string
	td.ScanArgs(t, key, &v)
	return v
}

func argUint(t *testing.T, td *datadriven.TestData, key string) uint64 {
	return mustUint(t, argString(t, td, key))
}

func argUintDefault(td *datadriven.TestData, key string, def uint64) uint64 {
	for _, a := range td.CmdArgs {
		if a.Key == key && len(a.Vals) > 0 {
			v, _ := strconv.ParseUint(a.Vals[0], 10, 64)
			return v
		}
	}
	return def
}

func mustUint(t *testing.T, s string) uint64 {
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}
