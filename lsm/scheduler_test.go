package lsm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// gateScheduler is a CompactionScheduler that refuses every compaction
// while shut, so that the DB caches the compaction it picked, and grants
// every one once open.
type gateScheduler struct {
	db      pebble.DBForCompaction
	open    atomic.Bool
	refused atomic.Int32
}

func (g *gateScheduler) Register(_ int, db pebble.DBForCompaction) { g.db = db }
func (g *gateScheduler) Unregister()                               {}
func (g *gateScheduler) UpdateGetAllowedWithoutPermission()        {}
func (g *gateScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	if g.open.Load() {
		return true, noopGrant{}
	}
	g.refused.Add(1)
	return false, nil
}

type noopGrant struct{}

func (noopGrant) Started()                                          {}
func (noopGrant) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (noopGrant) CumulativeStats(pebble.CompactionGrantHandleStats) {}
func (noopGrant) Done()                                             {}

// flushOverlapping flushes files L0 files into db, each holding the same
// 100 keys.
func flushOverlapping(t *testing.T, db *pebble.DB, files int) {
	for round := range files {
		for i := range 100 {
			require.NoError(t, db.Set(fmt.Appendf(nil, "k%03d", i), fmt.Appendf(nil, "v%d", round), pebble.NoSync))
		}
		require.NoError(t, db.Flush())
	}
}

// cancelledManualPick opens a Pebble DB whose scheduler refuses every
// compaction, gives it two overlapping L0 files, and cancels a manual
// compaction of them after Pebble has picked it and cached the pick.
func cancelledManualPick(t *testing.T) (*pebble.DB, *gateScheduler) {
	gate := &gateScheduler{}
	opts := &pebble.Options{
		FS:                          vfs.NewMem(),
		DisableAutomaticCompactions: true,
		Logger:                      &recordingLogger{},
	}
	opts.Experimental.CompactionScheduler = gate
	db, err := pebble.Open("db", opts)
	require.NoError(t, err)
	flushOverlapping(t, db, 2)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- db.Compact(ctx, []byte("k"), []byte("l"), false) }()
	require.Eventually(t, func() bool { return gate.refused.Load() > 0 }, 10*time.Second, time.Millisecond,
		"Pebble never asked to run the manual compaction")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	return db, gate
}

// TestStaleManualPick shows the Pebble behaviour compactionScheduler guards
// against: once a manual compaction that Pebble picked and cached is
// cancelled, running the cached pick panics; through guardedDB it is
// dropped, and the DB goes on compacting.
func TestStaleManualPick(t *testing.T) {
	t.Run("pebble panics", func(t *testing.T) {
		db, gate := cancelledManualPick(t)
		waiting, _ := gate.db.GetWaitingCompaction()
		require.True(t, waiting)
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			gate.db.Schedule(noopGrant{})
		}()
		require.NotNil(t, recovered, "running the cancelled pick did not panic")
		err, ok := recovered.(error)
		require.True(t, ok, "panic value %v", recovered)
		require.Contains(t, err.Error(), staleManualPick)
		require.NoError(t, db.Close())
	})
	t.Run("guarded", func(t *testing.T) {
		db, gate := cancelledManualPick(t)
		log := &recordingLogger{}
		guarded := guardedDB{DBForCompaction: gate.db, logger: log}
		require.False(t, guarded.Schedule(noopGrant{}))
		require.Contains(t, log.text(), "dropped a cancelled manual compaction")
		// Pebble picks afresh: a new manual compaction runs. Pebble still
		// waits for the scheduler to grant, which the gate does not do by
		// itself: grant by hand until the compaction ends.
		gate.open.Store(true)
		errc := make(chan error, 1)
		go func() { errc <- db.Compact(context.Background(), []byte("k"), []byte("l"), false) }()
		deadline := time.After(10 * time.Second)
	grant:
		for {
			select {
			case err := <-errc:
				require.NoError(t, err)
				break grant
			case <-deadline:
				t.Fatal("the manual compaction did not end")
			case <-time.After(time.Millisecond):
				if waiting, _ := guarded.GetWaitingCompaction(); waiting {
					guarded.Schedule(noopGrant{})
				}
			}
		}
		m := db.Metrics()
		require.Zero(t, m.Levels[0].TablesCount, "L0 after the compaction")
		require.NoError(t, db.Close())
	})
}

// TestCompactionScheduler runs Pebble's automatic compactions through the
// store's scheduler with one compaction slot. While the test holds the
// slot, L0 past its threshold waits (over several of the scheduler's
// ticks); once the slot is Done, the scheduler grants the waiting
// compaction itself, since Pebble asked once and now waits for it. Close
// stops the scheduler's goroutine (TestMain's leak check).
func TestCompactionScheduler(t *testing.T) {
	sched := newCompactionScheduler(&recordingLogger{})
	opts := &pebble.Options{
		FS:                         vfs.NewMem(),
		L0CompactionThreshold:      2,
		CompactionConcurrencyRange: func() (int, int) { return 1, 1 },
		Logger:                     &recordingLogger{},
	}
	opts.Experimental.CompactionScheduler = sched
	db, err := pebble.Open("db", opts)
	require.NoError(t, err)
	ok, held := sched.TrySchedule()
	require.True(t, ok, "the one slot of an idle DB")
	flushOverlapping(t, db, 8)
	time.Sleep(5 * schedulerTick)
	require.Zero(t, db.Metrics().Compact.Count, "a compaction ran while the only slot was held")
	held.Done()
	require.Eventually(t, func() bool {
		m := db.Metrics()
		return m.Levels[0].TablesCount < 2 && m.Compact.Count > 0
	}, 10*time.Second, 10*time.Millisecond, "L0 was not compacted after the slot was freed")
	require.NoError(t, db.Close())
}
