package compaction

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var seedFlag = flag.Uint64("seed", 0, "seed for randomized tests (0: testutil.DefaultSeed, or time based with -random-seeds)")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func testSeed(t testing.TB) uint64 { return testutil.Seed(t, "seed", *seedFlag) }

func openStore(t testing.TB) *lsm.Store {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	return s
}

// workload writes epochs of inserts, updates and deletes into one table
// (testutil.Churn) and keeps its rows.
type workload struct {
	t   testing.TB
	s   *lsm.Store
	def lsm.TableDef
	w   *lsm.Writer
	gen *testutil.Churn
	// live is the rows written (committed once run commits the epoch).
	live map[uint64]string
}

func newWorkload(t testing.TB, s *lsm.Store, table uint32, vnodes int, seed uint64) *workload {
	def := lsm.TableDef{ID: table, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	def, err := s.Table(table)
	require.NoError(t, err)
	w, err := s.NewWriter(table, nil, nil)
	require.NoError(t, err)
	gen := testutil.NewChurn(seed^uint64(table)<<32, def.VnodeOf)
	gen.RowLen = 40
	return &workload{t: t, s: s, def: def, w: w, gen: gen, live: gen.Live()}
}

// step writes n ops at the next epoch (updPct% updates, delPct% deletes of
// live rows, inserts otherwise) and seals it; commit separately.
func (wl *workload) step(epoch uint64, n, updPct, delPct int) {
	_, err := wl.gen.Write(wl.w, epoch, n, updPct, delPct)
	require.NoError(wl.t, err)
	require.NoError(wl.t, wl.w.Seal(epoch))
}

// run writes epochs over the given workloads, committing each epoch.
func run(t testing.TB, s *lsm.Store, epochs, n, updPct, delPct int, wls ...*workload) {
	for range epochs {
		e := s.EpochFloor() + 1
		for _, wl := range wls {
			wl.step(e, n, updPct, delPct)
		}
		require.NoError(t, s.Commit(e))
	}
}

func (wl *workload) rows() map[uint64]string {
	out := map[uint64]string{}
	for v := 0; v < wl.def.VnodeCount; v++ {
		it, err := wl.s.NewIter(wl.def.ID, uint16(v), nil, nil)
		require.NoError(wl.t, err)
		for ok := it.First(); ok; ok = it.Next() {
			pk, _, _ := keys.DecodeUint64(it.PK())
			out[pk] = string(it.Row())
		}
		require.NoError(wl.t, it.Close())
	}
	return out
}

// requireClean checks that every vnode holds exactly one entry per live
// row.
func requireClean(t testing.TB, s *lsm.Store, wl *workload) {
	st := s.Stats()
	for v := 0; v < wl.def.VnodeCount; v++ {
		p, l := st.Physical.Vnode(wl.def.ID, uint16(v)), st.Live.Vnode(wl.def.ID, uint16(v))
		require.Equal(t, uint64(l.Rows), p.Entries, "table %d vnode %d: %+v", wl.def.ID, v, p)
		require.Zero(t, p.PebbleTombstones, "table %d vnode %d", wl.def.ID, v)
	}
}

// TestPolicyRound: a churned table is planned, collected and compacted to
// one entry per live row in one round; an insert-only table is left alone;
// the next plan is empty.
func TestPolicyRound(t *testing.T) {
	seed := testSeed(t)
	s := openStore(t)
	defer func() { require.NoError(t, s.Close()) }()
	churned := newWorkload(t, s, 1, 16, seed)
	clean := newWorkload(t, s, 2, 16, seed)
	run(t, s, 2, 800, 0, 0, churned, clean)
	for range 10 {
		e := s.EpochFloor() + 1
		churned.step(e, 300, 30, 30)
		clean.step(e, 100, 0, 0)
		require.NoError(t, s.Commit(e))
	}
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, MaxRangesPerRound: 100, Rate: -1})
	require.NoError(t, err)
	plan := p.Plan()
	require.NotEmpty(t, plan)
	for _, c := range plan {
		require.Equal(t, uint32(1), c.Table, "%s", c)
		require.True(t, c.Reason.needsGC(), "%s", c)
	}
	t2 := s.Stats().Physical.Table(2)
	rd, err := p.RunRound(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(plan), len(rd.GC))
	require.Positive(t, rd.Compactions)
	require.LessOrEqual(t, rd.Compactions, len(plan))
	requireClean(t, s, churned)
	// Compacting table 1 rewrites SSTs shared with table 2: its counts stay
	// (value bytes are apportioned per SST, an estimate that may move).
	t2.Counts.ValueBytes, t2.TotalValueSize = 0, 0
	t2after := s.Stats().Physical.Table(2)
	t2after.Counts.ValueBytes, t2after.TotalValueSize = 0, 0
	require.Equal(t, t2, t2after, "the clean table was not collected")
	require.Equal(t, churned.live, churned.rows())
	require.Equal(t, clean.live, clean.rows())
	require.Empty(t, p.Plan(), "nothing left to do")
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	m := p.Counters()
	require.Equal(t, int64(1), m.Rounds)
	require.Positive(t, m.VersionsDeleted)
	t.Logf("round: %d ranges, %d versions deleted, %v", len(rd.Candidates), m.VersionsDeleted, rd.Duration)
}

// TestPolicyBounds: a round processes at most MaxRangesPerRound ranges of
// at most MaxVnodesPerRange vnodes, largest garbage first; rounds converge.
func TestPolicyBounds(t *testing.T) {
	s := openStore(t)
	defer func() { require.NoError(t, s.Close()) }()
	wl := newWorkload(t, s, 1, 16, testSeed(t))
	run(t, s, 1, 800, 0, 0, wl)
	run(t, s, 8, 300, 40, 30, wl)
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, MaxRangesPerRound: 1, MaxVnodesPerRange: 3, Rate: -1})
	require.NoError(t, err)
	rounds := 0
	for ; len(p.Plan()) > 0; rounds++ {
		require.Less(t, rounds, 16, "rounds must converge")
		plan := p.Plan()
		rd, err := p.RunRound(context.Background())
		require.NoError(t, err)
		require.Len(t, rd.Candidates, 1)
		c := rd.Candidates[0]
		require.LessOrEqual(t, c.VnodeHi-c.VnodeLo, 3)
		require.Equal(t, plan[0], c)
	}
	require.GreaterOrEqual(t, rounds, 6, "16 vnodes in ranges of at most 3, one per round")
	requireClean(t, s, wl)
	require.Equal(t, wl.live, wl.rows())
}

// TestPolicyPinned: garbage a pin keeps is tried once, then skipped until
// the safe epoch moves.
func TestPolicyPinned(t *testing.T) {
	s := openStore(t)
	defer func() { require.NoError(t, s.Close()) }()
	wl := newWorkload(t, s, 1, 8, testSeed(t))
	run(t, s, 1, 400, 0, 0, wl)
	sn, err := s.Snapshot()
	require.NoError(t, err)
	run(t, s, 6, 200, 50, 20, wl)
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, MaxRangesPerRound: 100, Rate: -1})
	require.NoError(t, err)
	rd, err := p.RunRound(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, rd.Candidates)
	for _, g := range rd.GC {
		require.Equal(t, sn.Epoch(), g.SafeEpoch)
	}
	require.Empty(t, p.Plan(), "the pinned garbage is not retried while the safe epoch stays")
	rd, err = p.RunRound(context.Background())
	require.NoError(t, err)
	require.Empty(t, rd.GC)
	sn.Close()
	require.NotEmpty(t, p.Plan(), "the safe epoch moved")
	_, err = p.RunRound(context.Background())
	require.NoError(t, err)
	requireClean(t, s, wl)
	require.Empty(t, p.Plan())
}

// TestPolicyTombstonesOnly: GC that ran without a compaction leaves
// SINGLEDELs; the tombstone trigger compacts them away without another GC.
func TestPolicyTombstonesOnly(t *testing.T) {
	s := openStore(t)
	defer func() { require.NoError(t, s.Close()) }()
	wl := newWorkload(t, s, 1, 4, testSeed(t))
	run(t, s, 1, 400, 0, 0, wl)
	run(t, s, 6, 200, 40, 40, wl)
	_, err := s.GC(context.Background(), lsm.GCRequest{Table: 1})
	require.NoError(t, err)
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, Rate: -1})
	require.NoError(t, err)
	plan := p.Plan()
	require.NotEmpty(t, plan)
	for _, c := range plan {
		require.Equal(t, ReasonTombstones, c.Reason, "%s", c)
	}
	rd, err := p.RunRound(context.Background())
	require.NoError(t, err)
	require.Empty(t, rd.GC)
	require.Positive(t, rd.Compactions)
	requireClean(t, s, wl)
}

// TestPolicyStartStop: the loop converges in the background; Stop cancels
// a slow, paced round promptly and leaks no goroutine; Start after Stop and
// bad configurations are refused.
func TestPolicyStartStop(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s := openStore(t)
	defer func() { require.NoError(t, s.Close()) }()
	wl := newWorkload(t, s, 1, 8, testSeed(t))
	run(t, s, 1, 600, 0, 0, wl)
	run(t, s, 6, 300, 30, 30, wl)

	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, Interval: 2 * time.Millisecond, MaxRangesPerRound: 2, Rate: -1})
	require.NoError(t, err)
	require.NoError(t, p.Start())
	require.Error(t, p.Start())
	deadline := time.Now().Add(20 * time.Second)
	for len(p.Plan()) > 0 || p.Counters().Compactions == 0 {
		require.True(t, time.Now().Before(deadline), "the loop never converged: %+v", p.Counters())
		time.Sleep(5 * time.Millisecond)
	}
	p.Stop()
	p.Stop()
	require.Error(t, p.Start())
	requireClean(t, s, wl)
	require.Equal(t, wl.live, wl.rows())

	// A round paced at 50 versions/s over thousands of versions is in
	// progress when Stop comes: Stop cancels it.
	run(t, s, 4, 300, 30, 30, wl)
	slow, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 16}, Interval: time.Millisecond, Rate: 50, Burst: 10})
	require.NoError(t, err)
	passes := s.Metrics().GCPasses
	require.NoError(t, slow.Start())
	for s.Metrics().GCPasses == passes {
		require.True(t, time.Now().Before(deadline), "the slow round never started")
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	slow.Stop()
	require.Less(t, time.Since(start), 2*time.Second, "Stop must cancel the paced round")
	require.Equal(t, wl.live, wl.rows())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)

	for _, cfg := range []Config{
		{},
		{Store: s, Thresholds: Thresholds{VersionRatio: 0.5}},
		{Store: s, Thresholds: Thresholds{DeleteShare: 1.5}},
		{Store: s, Thresholds: Thresholds{TombstoneShare: -1}},
		{Store: s, Interval: -time.Second},
		{Store: s, MaxRangesPerRound: -1},
	} {
		_, err := New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}

// TestPolicyClosedStore: a round on a closed store fails with lsm.ErrClosed
// and the loop ends by itself.
func TestPolicyClosedStore(t *testing.T) {
	s := openStore(t)
	wl := newWorkload(t, s, 1, 4, 1)
	run(t, s, 1, 200, 0, 0, wl)
	run(t, s, 4, 100, 50, 40, wl)
	p, err := New(Config{Store: s, Thresholds: Thresholds{MinGarbage: 8}, Rate: -1})
	require.NoError(t, err)
	require.NotEmpty(t, p.Plan())
	require.NoError(t, s.Close())
	_, err = p.RunRound(context.Background())
	require.True(t, errors.Is(err, lsm.ErrClosed), "%v", err)
	p.Stop()
}

// TestMergeSharingSSTs: ranges of a table that overlap one SST are
// compacted together; ranges in other SSTs or tables stay apart.
func TestMergeSharingSSTs(t *testing.T) {
	file := func(table uint32, lo, hi uint16) ssttracker.FileInfo {
		return ssttracker.FileInfo{
			Smallest: keys.AppendVersioned(nil, table, lo, keys.AppendUint64(nil, 1), keys.MakeVersion(1, 0), keys.KindPut),
			Largest:  keys.AppendVersioned(nil, table, hi, keys.AppendUint64(nil, 9), keys.MakeVersion(1, 0), keys.KindPut),
		}
	}
	files := []ssttracker.FileInfo{file(1, 0, 9), file(1, 20, 29), file(2, 0, 63)}
	ranges := []Candidate{
		{Table: 1, VnodeLo: 24, VnodeHi: 26, Garbage: 1},
		{Table: 1, VnodeLo: 0, VnodeHi: 2, Garbage: 2},
		{Table: 2, VnodeLo: 40, VnodeHi: 41, Garbage: 3},
		{Table: 1, VnodeLo: 5, VnodeHi: 7, Garbage: 4},
		{Table: 1, VnodeLo: 12, VnodeHi: 14, Garbage: 5},
		{Table: 2, VnodeLo: 3, VnodeHi: 4, Garbage: 6},
	}
	got := mergeSharingSSTs(ranges, files)
	require.Equal(t, []Candidate{
		{Table: 1, VnodeLo: 0, VnodeHi: 7, Garbage: 6},
		{Table: 1, VnodeLo: 12, VnodeHi: 14, Garbage: 5},
		{Table: 1, VnodeLo: 24, VnodeHi: 26, Garbage: 1},
		{Table: 2, VnodeLo: 3, VnodeHi: 41, Garbage: 9},
	}, got)
}
