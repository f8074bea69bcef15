package backfill_test

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// snapshotParams are the workloads of the snapshot backfill tests: the
// three tables of multiParams, with the churn during the backfill spread
// over 30 steps and doubled, so that the log store holds a good share of
// the snapshot's rows when the snapshot phase ends.
func snapshotParams(seed uint64, scale float64) []workload.Params {
	ps := multiParams(seed, scale)
	for i := range ps {
		ps[i].DuringSteps = 30
		ps[i].UpdateDuring *= 2
		ps[i].DeleteDuring *= 2
		ps[i].InsertDuring *= 2
	}
	return ps
}

// TestSnapshotAccuracy runs a snapshot backfill over three upstream tables
// with heavy churn, restarting it once in the log-store phase with another
// actor count. Its stats figure (the phase-aware one) must be within 0.5 pp
// of the truth on average and 2 pp at most; the log store must hold at
// least 20% of the snapshot's rows when the snapshot phase ends; the
// display rules hold (never decreasing, 100% only once joined); the phases
// come in order; each MV equals its table at the end.
func TestSnapshotAccuracy(t *testing.T) {
	seed := testSeed(t)
	ps := snapshotParams(seed, 0.2)
	dir := t.TempDir()
	errs := map[string]*bench.ErrorStats{}
	var display backfilltest.Display
	var phases []string
	var logAtEnd, snapRows float64 // when the snapshot phase ended
	etas := map[string]map[backfill.ETAStatus]int{}
	record := func(r backfill.Record) {
		if etas[r.Phase] == nil {
			etas[r.Phase] = map[backfill.ETAStatus]int{}
		}
		etas[r.Phase][r.ETA.Status]++
		require.NoError(t, display.Add(r))
		require.GreaterOrEqual(t, r.Truth, 0.0)
		for _, f := range r.Figures {
			bench.AddError(errs, f, r.Truth)
		}
		if len(phases) == 0 || phases[len(phases)-1] != r.Phase {
			if r.Phase == "log store" && len(phases) > 0 {
				logAtEnd = float64(r.LogConsumed + r.LogPending)
			}
			phases = append(phases, r.Phase)
		}
		if r.Phase == "snapshot" {
			snapRows = float64(r.SnapshotRows)
		}
		require.Equal(t, r.Phase == "joined", r.Finished, "finished only once joined: %s", r.Figure("stats").Shown)
	}
	open := func(actors int) (*lsm.Store, *backfill.Job) {
		s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		j, _, err := multiJobMode(s, ps, backfill.JobConfig{Mode: backfill.ModeSnapshot, Actors: actors, BarrierRows: 100,
			OnCheckpoint: record})
		require.NoError(t, err)
		// Every upstream's truth comes from a scan at the epoch asked.
		return s, j
	}
	s, j := open(2)
	for len(phases) < 2 || phases[len(phases)-1] != "log store" {
		_, _, err := j.Step(context.Background())
		require.NoError(t, err)
	}
	_, _, err := j.Step(context.Background())
	require.NoError(t, err)
	require.NoError(t, s.Close()) // dropped unclosed in the log-store phase
	s, j = open(3)
	require.NotNil(t, j.Initial())
	record(*j.Initial())
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.NoError(t, display.Done())
	require.NoError(t, j.Compare())
	require.NoError(t, j.Close())
	require.NoError(t, s.Close())
	st, rc := errs["stats"], errs["rowcount"]
	t.Logf("phases %v; log store at the snapshot's end %.0f rows (%.0f%% of the snapshot's %.0f); stats mean %.3f max %.3f pp; rowcount mean %.3f max %.3f pp over %d checkpoints",
		phases, logAtEnd, 100*logAtEnd/snapRows, snapRows, st.MeanPP, st.MaxPP, rc.MeanPP, rc.MaxPP, st.N)
	require.Equal(t, []string{"snapshot", "log store", "joined"}, compact(phases))
	// The ETA covers both phases: it forecasts in each, and says finished
	// once joined.
	t.Logf("ETA statuses by phase: %v", etas)
	for _, p := range []string{"snapshot", "log store"} {
		require.Positive(t, etas[p][backfill.ETARunning]+etas[p][backfill.ETADiverging], "an ETA in the %s phase", p)
	}
	require.Equal(t, len(etas["joined"]), 1)
	require.Positive(t, etas["joined"][backfill.ETAFinished])
	require.GreaterOrEqual(t, logAtEnd, 0.2*snapRows, "the log store holds at least 20%% of the snapshot's rows")
	require.LessOrEqual(t, st.MeanPP, 0.5)
	require.LessOrEqual(t, st.MaxPP, 2.0)
}

// compact drops repeats of consecutive phases (a restart repeats one).
func compact(phases []string) []string {
	var out []string
	for _, p := range phases {
		if len(out) == 0 || out[len(out)-1] != p {
			out = append(out, p)
		}
	}
	return out
}

const snapChildDirEnv = "LSMSTATS_BACKFILL_SNAPSHOT_CHILD_DIR"

// snapshotCrashJob is the configuration of TestSnapshotCrash's job: a
// snapshot backfill over three tables that stays joined for 40 steps
// before Run returns.
func snapshotCrashJob(s *lsm.Store, seed uint64, actors int) (backfill.JobConfig, *genjob.Multi, error) {
	return multiJobConfig(s, snapshotParams(seed, 0.2), backfill.JobConfig{Mode: backfill.ModeSnapshot, Actors: actors,
		BarrierRows: 60, TailSteps: 40})
}

// phaseLine prints a record for the parent: "R barrier step finished
// phase approach=pct...", the phase without its space.
func phaseLine(kind string, r backfill.Record) string {
	l := recordLine(kind, r)
	f := strings.SplitN(l, " ", 5)
	f = append(f[:4], append([]string{strings.ReplaceAll(r.Phase, " ", "-")}, f[4:]...)...)
	return strings.Join(f, " ")
}

// snapshotCrashChild runs the job until it finishes or is killed.
func snapshotCrashChild(dir string, actors int, seed uint64) error {
	return runJobChild(dir, phaseLine, func(s *lsm.Store) (backfill.JobConfig, error) {
		cfg, _, err := snapshotCrashJob(s, seed, actors)
		return cfg, err
	})
}

// TestSnapshotCrash kills a child process running a snapshot backfill over
// three upstream tables with SIGKILL, at least 5 times in each phase
// (snapshot, log store, joined: a kill counts for the phase of the last
// checkpoint the child reported), at random moments after 1 or 2
// checkpoints, restarting it with 1 to 3 actors. The display rules hold over
// every run's records (never decreasing, 100% only once joined); the phases
// never go back; at the end each table's MV equals it, and each table is
// its workload to the committed step.
func TestSnapshotCrash(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 24))
	perPhase := max(5, *crashesFlag/2)
	dir := t.TempDir()
	var display backfilltest.Display
	kills := map[string]int{}
	order := map[string]int{"snapshot": 0, "log-store": 1, "joined": 2}
	phase := "snapshot"
	for run := 0; ; run++ {
		require.Less(t, run, 200, "the job does not finish")
		actors := 1 + r.IntN(3)
		c := testutil.StartChild(t, os.Stderr, snapChildDirEnv+"="+dir, childActorsEnv+"="+strconv.Itoa(actors),
			childSeedEnv+"="+strconv.FormatUint(seed, 10))
		var lines []string
		target := 1 + r.IntN(2)
		handle := func(l string) bool {
			lines = append(lines, l)
			if l[0] == 'R' || l[0] == 'I' {
				p := strings.Fields(l)[4]
				require.GreaterOrEqual(t, order[p], order[phase], "the phase went back: %s", l)
				phase = p
			}
			if l[0] == 'R' {
				target--
			}
			return kills[phase] < perPhase && target <= 0 || l[0] == 'D' || l[0] == 'E'
		}
		// No short timeout: one that ran out in a phase whose kills are all
		// done would let the child run to its end without a kill in the
		// phases after it (as it did under -race on a loaded machine).
		reason := c.ReadUntil(10*time.Minute, handle)
		require.NotEqual(t, testutil.TimedOut, reason, "run %d: the child printed nothing decisive in 10 minutes", run)
		kill := kills[phase] < perPhase && len(lines) > 0 && lines[len(lines)-1][0] == 'R'
		killedIn := phase
		if kill {
			c.KillAfter(t, time.Duration(r.IntN(20000))*time.Microsecond, func(l string) { handle(l) })
		} else {
			for l := range c.Lines() {
				handle(l)
			}
		}
		end := c.Wait()
		finished := addChildLines(t, &display, run, lines, func(l string) backfill.Record {
			f := strings.Fields(l) // phaseLine: the phase is the fifth field
			return parseRecordLine(t, strings.Join(append(f[:4:4], f[5:]...), " "))
		})
		if finished {
			require.NoError(t, end.Finished())
			break
		}
		require.True(t, end.Killed, "run %d ended without finishing: %+v", run, end)
		kills[killedIn]++
	}
	require.NoError(t, display.Done())
	t.Logf("kills by phase: %v", kills)
	for _, p := range []string{"snapshot", "log-store", "joined"} {
		require.GreaterOrEqual(t, kills[p], perPhase, "kills in the %s phase", p)
	}

	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	ps := snapshotParams(seed, 0.2)
	cfg, src, err := snapshotCrashJob(s, seed, 2)
	require.NoError(t, err)
	j, err := backfill.OpenJob(cfg)
	require.NoError(t, err)
	require.True(t, j.Finished())
	require.NoError(t, j.Compare())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	straight := make([]*workload.Generator, len(ps))
	for i, p := range ps {
		straight[i], err = workload.New(p)
		require.NoError(t, err)
	}
	ref := genjob.NewMulti(straight...)
	for ref.Step() < src.Step() {
		_, err := ref.Next(context.Background())
		require.NoError(t, err)
	}
	for i := range ps {
		require.Equal(t, straight[i].LiveRows(), s.Stats().Live.Table(uint32(1+i)).Rows, "upstream %d", i)
	}
	require.NoError(t, j.Close())
}

// TestSnapshotPinHoldsGC runs a garbage-collection pass of the upstream
// table at every checkpoint of a snapshot backfill with churn: during the
// snapshot phase no pass collects above the snapshot epoch (the job's pin
// holds it back, and the snapshot stays readable at it), and once the
// phase ended the passes go past it (the pin was released). The MV equals
// the upstream at the end.
func TestSnapshotPinHoldsGC(t *testing.T) {
	p, err := workload.Preset("update-churn", 3000, 8, testSeed(t))
	require.NoError(t, err)
	p.DuringSteps = 20
	p.UpdateDuring = 1
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	g, err := workload.New(p)
	require.NoError(t, err)
	var recs []backfill.Record
	j, err := backfill.OpenJob(backfill.JobConfig{Mode: backfill.ModeSnapshot, Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
		LogStore: 5, Actors: 2, BarrierRows: 100, Source: genjob.Source{G: g}, Score: backfilltest.Truth{Oracles: []backfilltest.Oracle{backfilltest.ScanOracle{Store: s, Table: 1}}, Store: s, LogStore: 5}.Score,
		OnCheckpoint: func(r backfill.Record) { recs = append(recs, r) }})
	require.NoError(t, err)
	var snapEpoch uint64
	gcDuring, gcAfter := 0, 0
	for !j.Finished() {
		_, ok, err := j.Step(context.Background())
		require.NoError(t, err)
		if !ok {
			continue
		}
		r := recs[len(recs)-1]
		if snapEpoch == 0 {
			snapEpoch = r.Epoch - 1 // the committed epoch when the job started
		}
		res, err := s.GC(context.Background(), lsm.GCRequest{Table: 1})
		require.NoError(t, err)
		if r.Phase == "snapshot" && !allFinished(r) {
			require.LessOrEqual(t, res.SafeEpoch, snapEpoch, "a pass collected above the pinned snapshot epoch")
			require.LessOrEqual(t, s.GCEpoch(), snapEpoch)
			gcDuring++
		} else if r.Phase != "snapshot" {
			require.Greater(t, res.SafeEpoch, snapEpoch, "the pin outlived the snapshot phase")
			gcAfter++
		}
	}
	require.Positive(t, gcDuring)
	require.Positive(t, gcAfter)
	require.NoError(t, j.Compare())
	require.NoError(t, backfilltest.CheckDisplay(recs))
	require.NoError(t, j.Close())
}

func allFinished(r backfill.Record) bool {
	for _, v := range r.Vnodes {
		if !v.Finished {
			return false
		}
	}
	return true
}
