package faultfs

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/stretchr/testify/require"
)

// TestSwitch: a switch injects nothing until a test sets an injector, then
// fails what that injector picks, counts it under its kind, and stops once
// set back to nil.
func TestSwitch(t *testing.T) {
	sw := &Switch{}
	fs := errorfs.Wrap(vfs.NewMem(), sw)
	create := func(name string) error {
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		if _, err := f.Write([]byte("x")); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	require.NoError(t, create("a.sst"))
	sw.Set(errorfs.ErrInjected.If(errorfs.And(OpIs(errorfs.OpFileWrite), errorfs.PathMatch("*.sst"))))
	err := create("b.sst")
	require.True(t, errors.Is(err, errorfs.ErrInjected), "%v", err)
	require.NoError(t, create("c.log"), "the path does not match")
	sw.Set(errorfs.ErrInjected.If(OpIs(errorfs.OpCreate)))
	require.True(t, errors.Is(create("d.sst"), errorfs.ErrInjected))
	sw.Set(nil)
	require.NoError(t, create("e.sst"))
	require.Equal(t, 2, sw.Counts.Total())
	require.Equal(t, "create=1 write=1 (total 2)", sw.Counts.Summary())
}

// TestKind: every kind has one name, the operations a test arms by name
// are the ones errorfs reports, and unnamed kinds stay apart.
func TestKind(t *testing.T) {
	seen := map[errorfs.OpKind]string{}
	for name, ks := range kinds {
		require.True(t, IsKind(name))
		for _, k := range ks {
			require.Empty(t, seen[k], "op%d named %s and %s", int(k), seen[k], name)
			seen[k] = name
			require.Equal(t, name, Kind(k))
		}
	}
	require.Equal(t, "read", Kind(errorfs.OpFileReadAt))
	require.Equal(t, "sync", Kind(errorfs.OpFileSyncData))
	require.Equal(t, "create", OpIs(errorfs.OpCreate).String())
	require.Equal(t, fmt.Sprintf("op%d", int(errorfs.OpLock)), Kind(errorfs.OpLock))
	require.False(t, IsKind("lock"))
}

// TestCounts: concurrent adds all count; Format sorts by kind and totals.
func TestCounts(t *testing.T) {
	var c Counts
	require.Equal(t, "(total 0)", c.Summary())
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Add([]string{"write", "sync", "open"}[j%3])
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 800, c.Total())
	require.Equal(t, "open=264 sync=264 write=272 (total 800)", c.Summary())
	require.Equal(t, "a=1 b=2 (total 3)", Format(map[string]int{"b": 2, "a": 1}))
}
