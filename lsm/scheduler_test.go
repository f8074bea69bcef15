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

// compacted reports whether db compacted its L0 below two files.
func compacted(db *pebble.DB) bool {
	m := db.Metrics()
	return m.Levels[0].TablesCount < 2 && m.Compact.Count > 0
}

// TestSchedulerSharedByTwoDBs opens two Pebble DBs on one store scheduler
// (options cloned with their scheduler, as rawPebble in bench_test.go did),
// each with one compaction slot. The second Register is logged as an error
// and the scheduler falls back to granting everything: the first DB's
// compaction, waiting because the test holds its slot, runs; the second DB
// compacts; after either DB closes, the other goes on compacting. A DB
// opened once both are closed is served afresh, its one slot limiting it
// again. Before the fallback, two ticker goroutines closed one channel
// ("close of closed channel") and the second DB took the first's grants.
func TestSchedulerSharedByTwoDBs(t *testing.T) {
	for _, closeFirst := range []int{0, 1} {
		t.Run(fmt.Sprintf("close=db%d-first", closeFirst+1), func(t *testing.T) {
			log := &recordingLogger{}
			sched := newCompactionScheduler(log)
			opts := &pebble.Options{
				FS:                         vfs.NewMem(),
				L0CompactionThreshold:      2,
				CompactionConcurrencyRange: func() (int, int) { return 1, 1 },
				Logger:                     &recordingLogger{},
			}
			opts.Experimental.CompactionScheduler = sched
			open := func(dir string) *pebble.DB {
				db, err := pebble.Open(dir, opts.Clone())
				require.NoError(t, err)
				return db
			}
			dbs := []*pebble.DB{open("db1")}
			ok, held := sched.TrySchedule()
			require.True(t, ok, "the one slot of an idle DB")
			flushOverlapping(t, dbs[0], 8)
			waiting, _ := dbs[0].GetWaitingCompaction()
			require.True(t, waiting, "db1 does not wait for its slot")
			require.Zero(t, dbs[0].Metrics().Compact.Count, "a compaction ran while the only slot was held")

			dbs = append(dbs, open("db2"))
			require.Eventually(t, func() bool { return compacted(dbs[0]) }, 10*time.Second, 10*time.Millisecond,
				"db1's waiting compaction did not run in the fallback")
			require.Contains(t, log.text(), "registered by 2 Pebble databases at once")
			flushOverlapping(t, dbs[1], 8)
			require.Eventually(t, func() bool { return compacted(dbs[1]) }, 10*time.Second, 10*time.Millisecond,
				"db2 did not compact in the fallback")
			held.Done()

			require.NoError(t, dbs[closeFirst].Close())
			other := dbs[1-closeFirst]
			before := other.Metrics().Compact.Count
			flushOverlapping(t, other, 8)
			require.Eventually(t, func() bool { return compacted(other) && other.Metrics().Compact.Count > before },
				10*time.Second, 10*time.Millisecond, "the DB left open did not compact after the other closed")
			require.NoError(t, other.Close())

			logged := len(log.text())
			db3 := open("db3")
			ok, held = sched.TrySchedule()
			require.True(t, ok, "the one slot of a fresh DB")
			flushOverlapping(t, db3, 8)
			time.Sleep(5 * schedulerTick)
			require.Zero(t, db3.Metrics().Compact.Count, "a compaction ran while the only slot was held: still in the fallback")
			held.Done()
			require.Eventually(t, func() bool { return compacted(db3) }, 10*time.Second, 10*time.Millisecond,
				"L0 was not compacted after the slot was freed")
			require.NoError(t, db3.Close())
			require.NotContains(t, log.text()[logged:], "registered by", "a DB opened after the others closed")
		})
	}
}

// TestRawPebbleBesideStore opens raw Pebble beside an open store the two
// ways the module's benchmarks have: with the store's own Pebble options
// cloned (their scheduler included; its fallback is logged, and both
// databases compact and close), and twice with one set of options from
// Options.PebbleOptions, which carry no scheduler:
// pebble.Open makes each its own, and nothing is logged.
func TestRawPebbleBesideStore(t *testing.T) {
	log := &recordingLogger{}
	fs := vfs.NewMem()
	s, err := Open("store", &Options{FS: fs, Logger: log})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	// overlap flushes eight overlapping L0 files into db, whose L0
	// compaction threshold is 2 (set below), and waits for a compaction.
	overlap := func(db *pebble.DB) {
		flushOverlapping(t, db, 8)
		require.Eventually(t, func() bool { return compacted(db) }, 10*time.Second, 10*time.Millisecond,
			"raw Pebble did not compact")
	}

	cloned := s.popts.Clone()
	cloned.EventListener = &pebble.EventListener{}
	cloned.L0CompactionThreshold = 2
	raw, err := pebble.Open("raw", cloned)
	require.NoError(t, err)
	require.Contains(t, log.text(), "registered by 2 Pebble databases at once")
	overlap(raw)
	require.NoError(t, raw.Close())

	logged := len(log.text())
	derived := (&Options{FS: fs, Logger: log}).PebbleOptions()
	derived.L0CompactionThreshold = 2
	raws := make([]*pebble.DB, 2)
	for i := range raws {
		raws[i], err = pebble.Open(fmt.Sprintf("raw%d", i), derived)
		require.NoError(t, err)
	}
	for _, db := range raws {
		overlap(db)
		require.NoError(t, db.Close())
	}
	require.NotContains(t, log.text()[logged:], "registered by")
}
