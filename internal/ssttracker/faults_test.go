package ssttracker

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Faults while the tracker reads SST properties. The file system is Pebble's
// errorfs over the real one (so the files survive the wrapper), with the
// injector swapped as a test goes: errorfs's own predicates (Reads,
// PathMatch, OnIndex) pick the operations, and a faultfs.Switch counts what
// it injected per kind of operation.

// openFaultPhys opens a physEnv whose file system injects what sw says.
func openFaultPhys(t *testing.T, sw *faultfs.Switch) *physEnv {
	e := &physEnv{t: t, dir: t.TempDir(), scratch: t.TempDir(), log: &physLogger{}}
	e.fs = errorfs.Wrap(vfs.Default, sw)
	e.open()
	t.Cleanup(e.close)
	sw.Counts.LogAtEnd(t)
	return e
}

// sstReads fails the n-th read-kind operation (open, read, stat) on an SST
// of the DB.
func sstReads(dir string, n int32) errorfs.Injector {
	return errorfs.ErrInjected.If(errorfs.And(errorfs.Reads, errorfs.PathMatch(dir+"/*.sst"), errorfs.OnIndex(n)))
}

// TestTrackerRefreshFaults fails each read a refresh makes in turn, both
// for a tracker that loads every file and for one that reads a newly
// ingested file: the refresh returns the injected error, publishes nothing
// (Current is the Version before it) and Err reports it; the next refresh
// without faults equals a recomputation and clears Err.
func TestTrackerRefreshFaults(t *testing.T) {
	sw := &faultfs.Switch{}
	e := openFaultPhys(t, sw)
	e.applyBatch(physParseOps(t, "put 1 0 1 1\nput 1 0 2 1\ndel 1 1 1 2\nmeta m"))
	require.NoError(t, e.db.Flush())
	for i := 0; i < 3; i++ {
		e.ingest(physParseOps(t, fmt.Sprintf("put 1 %d 5 %d\nput 2 %d 6 %d\ngcdel 1 %d 1 1", i, 10+i, i, 10+i, i)), nil)
	}
	check := func(tr *Tracker, what string) {
		sw.Set(nil)
		require.NoError(t, tr.Refresh(), what)
		require.NoError(t, tr.Err(), what)
		re, err := tr.Recompute()
		require.NoError(t, err)
		require.NoError(t, DiffVersions(tr.Current(), re), what)
	}
	failures := 0
	sweep := func(what string, tr *Tracker, prepare func()) {
		for n := int32(0); ; n++ {
			prepare()
			before := tr.Current()
			sw.Set(sstReads(e.dir, n))
			had := sw.Counts.Total()
			err := tr.Refresh()
			fired := sw.Counts.Total() > had
			if !fired {
				require.NoError(t, err, "%s: read #%d", what, n)
				check(tr, what)
				return
			}
			if err != nil {
				failures++
				require.True(t, errors.Is(err, errorfs.ErrInjected), "%s: read #%d: %v", what, n, err)
				require.True(t, before == tr.Current(), "%s: read #%d: a failed refresh published a Version", what, n)
				require.Error(t, tr.Err(), "%s: read #%d", what, n)
			}
			check(tr, fmt.Sprintf("%s after read #%d", what, n))
		}
	}
	// A tracker reading every file: a new one per attempt.
	var tr *Tracker
	for n := int32(0); ; n++ {
		tr = NewTracker(TrackerConfig{Dir: e.dir, FS: e.fs, ReaderOptions: e.opts.MakeReaderOptions(), Logger: e.log})
		tr.SetDB(e.db)
		sw.Set(sstReads(e.dir, n))
		had := sw.Counts.Total()
		err := tr.Refresh()
		if sw.Counts.Total() == had {
			require.NoError(t, err)
			check(tr, "first refresh")
			break
		}
		if err != nil {
			failures++
			require.True(t, errors.Is(err, errorfs.ErrInjected), "first refresh: read #%d: %v", n, err)
			require.Zero(t, tr.Current().NumFiles(), "a failed first refresh published a Version")
		}
		check(tr, "first refresh")
		require.NoError(t, tr.Close())
	}
	// The env's tracker, reading one new file per attempt.
	e.refresh()
	k := 0
	sweep("incremental refresh", e.tr, func() {
		sw.Set(nil)
		k++
		e.ingest(physParseOps(t, fmt.Sprintf("put 3 %d 1 1\nput 3 %d 2 1", k, k)), nil)
	})
	require.Positive(t, failures)
	_ = e.log.statsErrors()
}

// TestTrackerRetriesFailedRefresh: the refresh that an ingestion event
// asks for fails (every SST open fails); once the fault is gone the
// background goroutine catches up by itself, with no further event or
// Refresh call. Before the fix a failed background refresh was only logged,
// and the Version stayed behind until the next event.
func TestTrackerRetriesFailedRefresh(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sw := &faultfs.Switch{}
	e := openFaultPhys(t, sw)
	e.tr.Start()
	e.ingest(physParseOps(t, "put 1 0 1 1"), nil)
	e.refresh()
	sw.Set(errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpOpen), errorfs.PathMatch(e.dir+"/*.sst"))))
	e.ingest(physParseOps(t, "put 1 0 2 1\nput 1 1 3 1"), nil)
	deadline := time.Now().Add(10 * time.Second)
	for e.tr.Err() == nil {
		require.True(t, time.Now().Before(deadline), "the background refresh never failed")
		time.Sleep(time.Millisecond)
	}
	require.True(t, errors.Is(e.tr.Err(), errorfs.ErrInjected), "%v", e.tr.Err())
	require.Equal(t, 1, e.tr.Current().NumFiles())
	sw.Set(nil)
	for e.tr.Err() != nil || e.tr.Current().NumFiles() != 2 {
		require.True(t, time.Now().Before(deadline), "the tracker never caught up: %v", e.tr.Err())
		time.Sleep(time.Millisecond)
	}
	require.EqualValues(t, 3, tableEntries(e.tr.Current(), 1))
	require.Contains(t, strings.Join(e.log.statsErrors(), "\n"), "retrying in")
	e.close()
}

// TestCompactionDeltaAfterFailedRefresh: the refresh after a compaction
// cannot open the compaction's output. The delta of that compaction is
// delivered all the same, complete, once a retry succeeds.
func TestCompactionDeltaAfterFailedRefresh(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	sw := &faultfs.Switch{}
	e := openFaultPhys(t, sw)
	e.tr.Start()
	sub, cancel := e.tr.SubscribeCompactions(16)
	defer cancel()
	for i := 0; i < 3; i++ {
		e.applyBatch(physParseOps(t, fmt.Sprintf("put 1 0 %d 1\nput 1 1 %d 1\nput 2 0 %d 2", i, i, i)))
		require.NoError(t, e.db.Flush())
	}
	before := e.refresh()
	// Keep the inputs open in Pebble's file cache, then fail every open of an
	// SST: the compaction reads its inputs, the tracker cannot open the
	// output.
	it, err := e.db.NewIter(nil)
	require.NoError(t, err)
	for ok := it.First(); ok; ok = it.Next() {
	}
	require.NoError(t, it.Close())
	sw.Set(errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpOpen), errorfs.PathMatch(e.dir+"/*.sst"))))
	require.NoError(t, e.db.Compact(context.Background(), []byte{0}, physEverything, false))
	require.Error(t, e.tr.Refresh())
	require.True(t, before == e.tr.Current())
	sw.Set(nil)
	select {
	case d := <-sub:
		require.True(t, d.Complete(), "missing %v", d.Missing)
		require.NotEmpty(t, d.Tables)
		var in, out sstsummary.Counts
		for _, td := range d.Tables {
			in.Add(td.In)
			out.Add(td.Out)
		}
		require.Equal(t, tableEntries(before, 1)+tableEntries(before, 2), in.Entries)
		require.Equal(t, in.Entries, out.Entries, "no versions were dropped")
	case <-time.After(10 * time.Second):
		t.Fatal("no compaction delta")
	}
	re, err := e.tr.Recompute()
	require.NoError(t, err)
	require.NoError(t, DiffVersions(e.tr.Current(), re))
	e.close()
}
