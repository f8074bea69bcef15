package compaction

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// Faults in the work of a round: GC's ingestions (SSTs the store stages),
// and the manual compactions (SSTs Pebble writes). The file system is
// Pebble's errorfs over the real one, with the injector swapped as a test
// goes (a faultfs.Switch, which counts the faults injected per kind of
// operation); errorfs's predicates pick the operations.

func openFaultStore(t *testing.T, sw *faultfs.Switch, opts lsm.Options) (*lsm.Store, string) {
	dir := t.TempDir()
	opts.FS = errorfs.Wrap(vfs.Default, sw)
	opts.Logger = lsm.QuietLogger(nil)
	// After a failed compaction Pebble keeps its input spans out of
	// compactions for 30 s: no commit back-pressure on L0.
	opts.L0StopSublevels = -1
	s, err := lsm.Open(dir, &opts)
	require.NoError(t, err)
	sw.Counts.LogAtEnd(t)
	return s, dir
}

// TestPolicyFaults: a fault in a round's GC ingestion or compaction ends
// the round with the injected error, counted in Metrics.Errors; rows and
// statistics stay consistent, and the next round without faults finishes
// the work (every vnode holds one entry per live row).
func TestPolicyFaults(t *testing.T) {
	seed := testSeed(t)
	sw := &faultfs.Switch{}
	s, dir := openFaultStore(t, sw, lsm.Options{})
	defer func() { require.NoError(t, s.Close()) }()
	wl := newWorkload(t, s, 1, 16, seed)
	run(t, s, 1, 800, 0, 0, wl)
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, MaxRangesPerRound: 100, Rate: -1, BatchSize: 64})
	require.NoError(t, err)
	ingest := errorfs.PathMatch(dir + "/staging/ingest-*")
	sst := errorfs.PathMatch(dir + "/db/*.sst")
	for _, c := range []struct {
		name string
		inj  errorfs.Injector
	}{
		// The second GC batch cannot be written: the first one stays.
		{"gc batch write", errorfs.ErrInjected.If(errorfs.And(errorfs.Writes, ingest, errorfs.OnIndex(3)))},
		{"gc batch sync", errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpFileSync), ingest))},
		{"gc batch create", errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpCreate), ingest))},
		// Pebble opens the batch to ingest it.
		{"gc batch open", errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpOpen), ingest))},
		// The compaction's outputs: no file, or a file cut after its
		// first write. (Only writes count: errorfs.Writes would also count
		// Pebble's removal of obsolete SSTs, which retries it by itself.)
		{"compaction output create", errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpCreate), sst))},
		{"compaction output write", errorfs.ErrInjected.If(errorfs.And(faultfs.OpIs(errorfs.OpFileWrite), sst, errorfs.OnIndex(1)))},
	} {
		run(t, s, 6, 300, 30, 30, wl)
		require.NotEmpty(t, p.Plan(), c.name)
		errs := p.Counters().Errors
		// The checkpoints in the memtable go into SSTs first: a flush
		// during the round would take the fault meant for the round's
		// work (an SST write), and Pebble retries a failed flush by itself.
		require.NoError(t, lsminternal.DB(s).Flush(), c.name)
		// The flush may start one of Pebble's own compactions (of the
		// small metadata SSTs in L0, say), which would take the fault and
		// retry by itself: let it end first.
		require.Eventually(t, func() bool { m, err := s.PebbleMetrics(); return err == nil && m.Compact.NumInProgress == 0 },
			10*time.Second, 5*time.Millisecond, c.name)
		sw.Set(c.inj)
		had := sw.Counts.Total()
		_, err := p.RunRound(context.Background())
		sw.Set(nil)
		require.Greater(t, sw.Counts.Total(), had, "%s: no fault injected", c.name)
		require.Error(t, err, c.name)
		require.True(t, errors.Is(err, errorfs.ErrInjected), "%s: %v", c.name, err)
		require.Equal(t, errs+1, p.Counters().Errors, c.name)
		require.Equal(t, wl.live, wl.rows(), c.name)
		rep, err := s.Verify()
		require.NoError(t, err, c.name)
		require.Empty(t, rep.Differences, c.name)
		_, err = p.RunRound(context.Background())
		require.NoError(t, err, c.name)
		require.Empty(t, p.Plan(), c.name)
		requireCollected(t, s, wl)
	}
}

// requireCollected checks that GC left one version per live row in every
// vnode: entries minus Pebble tombstones equal live rows. (A vnode whose
// GC batches landed before the fault may keep fewer than MinGarbage
// tombstones, too few for a compaction of their own.)
func requireCollected(t testing.TB, s *lsm.Store, wl *workload) {
	st := s.Stats()
	for v := 0; v < wl.def.VnodeCount; v++ {
		p, l := st.Physical.Vnode(wl.def.ID, uint16(v)), st.Live.Vnode(wl.def.ID, uint16(v))
		require.Equal(t, uint64(l.Rows), p.Entries-p.PebbleTombstones, "table %d vnode %d: %+v", wl.def.ID, v, p)
	}
}

// TestPolicyLoopFaults: the background loop meets random faults in its GC
// ingestions and compactions, logs them and goes on; once the faults stop
// it converges. When the store refuses writes (a spill failed), the loop
// ends by itself.
func TestPolicyLoopFaults(t *testing.T) {
	seed := testSeed(t)
	sw := &faultfs.Switch{}
	s, dir := openFaultStore(t, sw, lsm.Options{MemoryWatermark: 64 << 10})
	defer func() { require.NoError(t, s.Close()) }()
	wl := newWorkload(t, s, 1, 8, seed)
	run(t, s, 1, 600, 0, 0, wl)
	run(t, s, 6, 300, 30, 30, wl)
	var mu sync.Mutex
	var logged []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, args...))
	}
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, Interval: 2 * time.Millisecond, MaxRangesPerRound: 2, Rate: -1, BatchSize: 64, Logf: logf})
	require.NoError(t, err)
	sw.Set(errorfs.ErrInjected.If(errorfs.And(errorfs.Writes,
		errorfs.Randomly(0.3, int64(seed)), errorfs.PathMatch(dir+"/staging/ingest-*"))))
	require.NoError(t, p.Start())
	deadline := time.Now().Add(20 * time.Second)
	for p.Counters().Errors < 3 {
		require.True(t, time.Now().Before(deadline), "no round failed: %+v", p.Counters())
		if len(p.Plan()) == 0 {
			run(t, s, 2, 300, 30, 30, wl) // more work for the loop
		}
		time.Sleep(time.Millisecond)
	}
	sw.Set(nil)
	collected := func() bool {
		st := s.Stats()
		for v := 0; v < wl.def.VnodeCount; v++ {
			p, l := st.Physical.Vnode(wl.def.ID, uint16(v)), st.Live.Vnode(wl.def.ID, uint16(v))
			if uint64(l.Rows) != p.Entries-p.PebbleTombstones {
				return false
			}
		}
		return true
	}
	for len(p.Plan()) > 0 || !collected() {
		require.True(t, time.Now().Before(deadline), "the loop never converged: %+v", p.Counters())
		time.Sleep(2 * time.Millisecond)
	}
	p.Stop()
	requireCollected(t, s, wl)
	require.Equal(t, wl.live, wl.rows())
	mu.Lock()
	require.Contains(t, strings.Join(logged, "\n"), "injected error")
	mu.Unlock()

	// A spill fails: the store refuses writes; the loop's next round meets
	// ErrFailed and the loop ends.
	run(t, s, 4, 300, 30, 30, wl)
	sw.Set(errorfs.ErrInjected.If(errorfs.And(errorfs.Writes, errorfs.PathMatch(dir+"/staging/spill-*"))))
	e := s.EpochFloor() + 1
	var werr error
	for i := 0; werr == nil; i++ {
		require.Less(t, i, 100000, "no spill")
		k := keys.AppendUint64(nil, 1<<40+uint64(i))
		werr = wl.w.Insert(e, wl.def.VnodeOf(k), k, []byte(strings.Repeat("s", 100)))
	}
	require.True(t, errors.Is(werr, lsm.ErrFailed), "%v", werr)
	sw.Set(nil)
	logged = nil
	p2, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, Interval: time.Millisecond, Rate: -1, Logf: logf})
	require.NoError(t, err)
	require.NoError(t, p2.Start())
	for {
		mu.Lock()
		done := strings.Contains(strings.Join(logged, "\n"), "the policy stops")
		mu.Unlock()
		if done {
			break
		}
		require.True(t, time.Now().Before(deadline), "the loop did not stop: %+v", p2.Counters())
		time.Sleep(time.Millisecond)
	}
	rounds := p2.Counters().Rounds
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, rounds, p2.Counters().Rounds, "no round after the store failed")
	p2.Stop()
}
