package backfill_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
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

// multiParams are the workloads of a job over three upstream tables of
// different sizes, vnode counts and pk shapes, each with churn before and
// during the backfill: a large one and two small ones, as a join MV reads a
// fact table and its dimension tables. rows scales them (1: 30,000, 2,000
// and 500 rows).
func multiParams(seed uint64, rows float64) []workload.Params {
	var ps []workload.Params
	for i, c := range []struct {
		preset string
		rows   int
		vnodes int
		shape  workload.Shape
	}{
		{"mixed", 30000, 64, workload.Hashed},
		{"update-churn", 2000, 16, workload.Sequential},
		{"delete-churn", 500, 8, workload.String},
	} {
		p, err := workload.Preset(c.preset, max(50, int(float64(c.rows)*rows)), c.vnodes, seed+uint64(i))
		if err != nil {
			panic(err)
		}
		p.Shape, p.DuringSteps, p.BatchRows = c.shape, 40, 5000
		ps = append(ps, p)
	}
	return ps
}

// multiJob opens a job over the workloads' tables (upstreams 1, 2, 3; MVs
// 11, 12, 13; states 21, 22, 23; meta 30), with a scan oracle per table.
func multiJob(s *lsm.Store, ps []workload.Params, actors, barrierRows int, onCheckpoint func(backfill.Record)) (*backfill.Job, *genjob.Multi, error) {
	return multiJobMode(s, ps, backfill.JobConfig{Actors: actors, BarrierRows: barrierRows, OnCheckpoint: onCheckpoint})
}

// multiJobMode opens a job over the workloads' tables as multiJob does,
// with cfg's mode, actors, barrier rows, tail steps and callback (a
// snapshot backfill's log store is table 40).
func multiJobMode(s *lsm.Store, ps []workload.Params, cfg backfill.JobConfig) (*backfill.Job, *genjob.Multi, error) {
	cfg, src, err := multiJobConfig(s, ps, cfg)
	if err != nil {
		return nil, nil, err
	}
	j, err := backfill.OpenJob(cfg)
	return j, src, err
}

// multiJobConfig is the configuration multiJobMode opens its job with.
func multiJobConfig(s *lsm.Store, ps []workload.Params, cfg backfill.JobConfig) (backfill.JobConfig, *genjob.Multi, error) {
	gs := make([]*workload.Generator, len(ps))
	var ups []backfill.UpstreamConfig
	truth := backfilltest.Truth{Store: s}
	for i, p := range ps {
		g, err := workload.New(p)
		if err != nil {
			return cfg, nil, err
		}
		gs[i] = g
		id := uint32(1 + i)
		def := p.TableDef(id)
		def.Name = fmt.Sprintf("upstream%d", i)
		ups = append(ups, backfill.UpstreamConfig{Table: def, MV: 11 + uint32(i), State: 21 + uint32(i)})
		truth.Oracles = append(truth.Oracles, backfilltest.ScanOracle{Store: s, Table: id})
	}
	src := genjob.NewMulti(gs...)
	cfg.Store, cfg.Upstreams, cfg.Meta, cfg.ChunkSize, cfg.Source = s, ups, 30, 64, src
	if cfg.Mode == backfill.ModeSnapshot {
		cfg.LogStore = 40
	}
	truth.LogStore = cfg.LogStore
	cfg.Score = truth.Score
	return cfg, src, nil
}

// checkMultiRecord checks that a record's figures are the sums of its
// upstreams' (each table weighs as its rows do).
func checkMultiRecord(t *testing.T, r backfill.Record, n int) {
	t.Helper()
	require.Len(t, r.Upstreams, n)
	require.GreaterOrEqual(t, r.Truth, 0.0)
	for _, f := range r.Figures {
		var c, tot float64
		for _, u := range r.Upstreams {
			uf := backfill.FigureOf(u.Figures, f.Approach)
			c, tot = c+uf.Consumed, tot+uf.Total
			require.GreaterOrEqual(t, u.Truth, 0.0)
		}
		require.InDelta(t, f.Consumed, c, 1e-6*math.Max(1, f.Total), "%s consumed", f.Approach)
		require.InDelta(t, f.Total, tot, 1e-6*math.Max(1, f.Total), "%s total", f.Approach)
	}
}

// TestMultiUpstreamAccuracy backfills three upstream tables (30,000, 2,000
// and 500 rows, 64, 16 and 8 vnodes, three pk shapes, churn before and
// during) with the same two actors, restarting the job halfway from what it
// committed (dropped unclosed, with another actor count: a rescale). At
// every checkpoint the job's stats figure must be within 0.2 pp of the
// truth on average and 1 pp at most (the truth over all three tables, by
// the scan oracles), and the job's figures the sums of the tables'. The
// row-count approach (RisingWave's Σ row counts over Σ total key counts)
// is logged beside it. The MV of each table equals it at the end.
func TestMultiUpstreamAccuracy(t *testing.T) {
	seed := testSeed(t)
	scale := 1.0
	if canonicalRows < 200000 {
		scale = 0.2 // race builds
	}
	ps := multiParams(seed, scale)
	dir := t.TempDir()
	errs := map[string]*bench.ErrorStats{}
	per := make([]map[string]*bench.ErrorStats, len(ps))
	for i := range per {
		per[i] = map[string]*bench.ErrorStats{}
	}
	var display backfilltest.Display
	recs := 0
	record := func(r backfill.Record) {
		checkMultiRecord(t, r, len(ps))
		require.NoError(t, display.Add(r))
		for _, f := range r.Figures {
			bench.AddError(errs, f, r.Truth)
		}
		for i, u := range r.Upstreams {
			for _, f := range u.Figures {
				bench.AddError(per[i], f, u.Truth)
			}
		}
		recs++
	}
	open := func(actors int) (*lsm.Store, *backfill.Job) {
		s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		j, _, err := multiJob(s, ps, actors, 512, record)
		require.NoError(t, err)
		return s, j
	}
	s, j := open(2)
	rows := 0
	for _, p := range ps {
		rows += p.Rows
	}
	for recs < max(2, rows/(2*512)/2) { // about halfway
		_, _, err := j.Step(context.Background())
		require.NoError(t, err)
	}
	require.False(t, j.Finished())
	require.NoError(t, s.Close()) // the job is dropped unclosed
	s, j = open(3)
	require.NotNil(t, j.Initial())
	record(*j.Initial())
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.NoError(t, display.Done())
	require.NoError(t, j.Compare())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	require.NoError(t, j.Close())
	require.NoError(t, s.Close())

	st, rc := errs["stats"], errs["rowcount"]
	t.Logf("%d checkpoints: stats mean %.3f max %.3f pp (bounds outside %d); rowcount mean %.3f max %.3f pp",
		recs, st.MeanPP, st.MaxPP, st.Outside, rc.MeanPP, rc.MaxPP)
	for i := range per {
		t.Logf("upstream %d (%d rows): stats mean %.3f max %.3f pp; rowcount mean %.3f max %.3f pp",
			i, ps[i].Rows, per[i]["stats"].MeanPP, per[i]["stats"].MaxPP, per[i]["rowcount"].MeanPP, per[i]["rowcount"].MaxPP)
	}
	require.Zero(t, st.Outside, "checkpoints whose truth lay outside the stats figure's bounds")
	if canonicalRows < 200000 {
		return // a race build's fifth of the rows: too few per vnode for the error bounds
	}
	require.LessOrEqual(t, st.MeanPP, 0.2, "stats mean error")
	require.LessOrEqual(t, st.MaxPP, 1.0, "stats max error")
}

// TestSingleAsMulti runs the same workload as a job over its one table
// (JobConfig.Upstream) and as a job of one upstream (JobConfig.Upstreams):
// the same mechanism, so the same figures, truth and MV.
func TestSingleAsMulti(t *testing.T) {
	p, err := workload.Preset("mixed", 6000, 16, testSeed(t))
	require.NoError(t, err)
	p.DuringSteps = 10
	run := func(multi bool) []backfill.Record {
		s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		defer s.Close()
		g, err := workload.New(p)
		require.NoError(t, err)
		cfg := backfill.JobConfig{Store: s, Meta: 4, Actors: 2, BarrierRows: 300, KeepRecords: true, Source: genjob.Source{G: g},
			Score: backfilltest.Oracles(genjob.Oracle{G: g})}
		if multi {
			cfg.Upstreams = []backfill.UpstreamConfig{{Table: p.TableDef(1), MV: 2, State: 3}}
		} else {
			cfg.Upstream, cfg.MV, cfg.State = p.TableDef(1), 2, 3
		}
		j, err := backfill.OpenJob(cfg)
		require.NoError(t, err)
		res, err := j.Run(context.Background())
		require.NoError(t, err)
		require.NoError(t, j.Compare())
		require.NoError(t, j.Close())
		return res.Records
	}
	a, b := run(false), run(true)
	require.Equal(t, len(a), len(b))
	for i := range a {
		require.Equal(t, a[i].Truth, b[i].Truth, "checkpoint %d", i)
		for _, name := range []string{"stats", "rowcount"} {
			require.Equal(t, a[i].Figure(name).Shown, b[i].Figure(name).Shown, "checkpoint %d", i)
		}
		require.Len(t, a[i].Upstreams, 1)
		require.Equal(t, a[i].Truth, a[i].Upstreams[0].Truth)
	}
}

// TestMultiUpstreamConfig checks the errors of a misconfigured job over
// several upstreams and of a source naming an upstream the job lacks.
func TestMultiUpstreamConfig(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	ps := multiParams(1, 0.05)
	g, err := workload.New(ps[0])
	require.NoError(t, err)
	up := func(i int) backfill.UpstreamConfig {
		return backfill.UpstreamConfig{Table: ps[i].TableDef(uint32(1 + i)), MV: 11 + uint32(i), State: 21 + uint32(i)}
	}
	for name, c := range map[string]struct {
		cfg  backfill.JobConfig
		want string
	}{
		"upstream and upstreams":  {backfill.JobConfig{Upstream: ps[0].TableDef(1), Upstreams: []backfill.UpstreamConfig{up(1)}}, "no Upstream, MV or State"},
		"same table twice":        {backfill.JobConfig{Upstreams: []backfill.UpstreamConfig{up(0), up(0)}}, "both table 1"},
		"more actors than vnodes": {backfill.JobConfig{Actors: 9, Upstreams: []backfill.UpstreamConfig{up(0), up(2)}}, "9 actors for 8 vnodes of upstream 3"},
	} {
		c.cfg.Store, c.cfg.Meta, c.cfg.Source = s, 30, genjob.Source{G: g}
		_, err := backfill.OpenJob(c.cfg)
		require.ErrorContains(t, err, c.want, name)
	}

	// A source's op of an upstream the job lacks fails the step, naming it.
	j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Meta: 30, Upstreams: []backfill.UpstreamConfig{up(0), up(1)},
		Source: &opsSource{ops: []backfill.RowOp{{Kind: backfill.Insert, Upstream: 2, Vnode: 0, PK: []byte{1}, Row: []byte("x")}}}})
	require.NoError(t, err)
	_, _, err = j.Step(context.Background())
	require.ErrorContains(t, err, "names upstream 2, job of 2 upstreams")
	require.NoError(t, j.Close())

	// A job reopened over other upstream tables, or in another mode, is
	// refused: its persisted state is not theirs.
	j, err = backfill.OpenJob(backfill.JobConfig{Store: s, Meta: 31, Upstreams: []backfill.UpstreamConfig{up(0), up(1)},
		Source: &opsSource{}})
	require.NoError(t, err)
	_, _, err = j.Step(context.Background())
	require.NoError(t, err)
	require.NoError(t, j.Close())
	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Meta: 31, Upstreams: []backfill.UpstreamConfig{up(0)}, Source: &opsSource{}})
	require.ErrorContains(t, err, "created over upstream tables [1 2], reopened over [1]")
	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Meta: 31, Upstreams: []backfill.UpstreamConfig{up(0), up(1)}, Source: &opsSource{},
		Mode: backfill.ModeSnapshot, LogStore: 32})
	require.ErrorContains(t, err, "created in mode arrangement, reopened in mode snapshot")
	_, err = backfill.OpenJob(backfill.JobConfig{Store: s, Meta: 33, Upstreams: []backfill.UpstreamConfig{up(0)}, Source: &opsSource{},
		Mode: backfill.ModeSnapshot})
	require.ErrorContains(t, err, "needs a log-store table")
}

// opsSource is a source of one step of given ops, its backfill from step 2.
type opsSource struct {
	ops  []backfill.RowOp
	step uint64
}

func (o *opsSource) Resume(at backfill.Position) error { o.step = at.Step; return nil }
func (o *opsSource) Step() uint64                      { return o.step }
func (o *opsSource) BackfillStep() uint64              { return 2 }
func (o *opsSource) Finished(uint64)                   {}
func (o *opsSource) Next(context.Context) ([]backfill.RowOp, error) {
	o.step++
	if o.step == 1 {
		return o.ops, nil
	}
	return nil, nil
}

const multiChildDirEnv = "LSMSTATS_BACKFILL_MULTI_CHILD_DIR"

// multiCrashChild runs the job of TestMultiUpstreamCrash until it finishes
// or is killed, with the actor count the parent asks for.
func multiCrashChild(dir string, actors int, seed uint64) error {
	return runJobChild(dir, recordLine, func(s *lsm.Store) (backfill.JobConfig, error) {
		cfg, _, err := multiJobConfig(s, multiParams(seed, 0.2), backfill.JobConfig{Actors: actors, BarrierRows: 60})
		return cfg, err
	})
}

// TestMultiUpstreamCrash kills a child process running a job over three
// upstream tables with SIGKILL at random moments, at least 5 times, and
// restarts it with 1 to 3 actors (a rescale at most restarts). The display
// rules hold over the records of every run; at the end each table's MV
// equals it, and each table is exactly its workload to the committed step
// (every restart resumed every generator from its table).
func TestMultiUpstreamCrash(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 19))
	kills := max(5, *crashesFlag/2)
	dir := t.TempDir()
	var display backfilltest.Display
	killed := 0
	for run := 0; ; run++ {
		require.Less(t, run, 100, "the job does not finish")
		kill := killed < kills
		actors := 1 + r.IntN(3)
		c := testutil.StartChild(t, os.Stderr, multiChildDirEnv+"="+dir, childActorsEnv+"="+strconv.Itoa(actors),
			childSeedEnv+"="+strconv.FormatUint(seed, 10))
		var lines []string
		target := 1 + r.IntN(3)
		handle := func(l string) bool {
			lines = append(lines, l)
			if l[0] == 'R' {
				target--
			}
			return kill && target == 0 || l[0] == 'D' || l[0] == 'E'
		}
		c.ReadUntil(2*time.Minute, handle)
		if kill {
			c.KillAfter(t, time.Duration(r.IntN(20000))*time.Microsecond, func(l string) { handle(l) })
		}
		end := c.Wait()
		finished := addChildLines(t, &display, run, lines, func(l string) backfill.Record { return parseRecordLine(t, l) })
		if finished {
			require.NoError(t, end.Finished())
			break
		}
		require.True(t, end.Killed, "run %d ended without finishing: %+v", run, end)
		killed++
	}
	require.NoError(t, display.Done())
	require.GreaterOrEqual(t, killed, kills)

	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	ps := multiParams(seed, 0.2)
	j, src, err := multiJob(s, ps, 2, 60, nil)
	require.NoError(t, err)
	require.True(t, j.Finished())
	require.NoError(t, j.Compare())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	// Each table is its workload run without a crash to the committed step.
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
	for i, p := range ps {
		var want int64
		for v := range p.VnodeCount {
			it, err := s.NewIter(uint32(1+i), uint16(v), nil, nil)
			require.NoError(t, err)
			ok := it.First()
			straight[i].EachRow(uint16(v), func(pk, row []byte) {
				require.True(t, ok, "upstream %d vnode %d: the table ends before pk %x", i, v, pk)
				require.Equal(t, pk, it.PK())
				require.Equal(t, row, it.Row())
				ok = it.Next()
				want++
			})
			require.False(t, ok, "upstream %d vnode %d: the table has more rows than the workload", i, v)
			require.NoError(t, it.Close())
		}
		require.Equal(t, want, s.Stats().Live.Table(uint32(1+i)).Rows)
	}
	require.NoError(t, j.Close())
	t.Logf("%d kills, committed step %d", killed, src.Step())
}

// TestMultiUpstreamNamed opens a named snapshot backfill over two upstream
// tables: the catalog allocates every table's id by name, and the reopened
// job finds the same ones.
func TestMultiUpstreamNamed(t *testing.T) {
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	ps := multiParams(1, 0.05)
	a, b := ps[0].TableDef(1), ps[1].TableDef(2)
	a.Name, b.Name = "orders", "customers"
	open := func() *backfill.Job {
		j, err := backfill.OpenJob(backfill.JobConfig{Store: s, Name: "joined", Mode: backfill.ModeSnapshot,
			Upstreams: []backfill.UpstreamConfig{{Table: a}, {Table: b}}, Source: &opsSource{}})
		require.NoError(t, err)
		return j
	}
	j := open()
	_, _, err = j.Step(context.Background())
	require.NoError(t, err)
	ups := j.Upstreams()
	require.NoError(t, j.Close())
	names := map[string]uint32{}
	for _, d := range s.Tables() {
		names[d.Name] = d.ID
	}
	require.Equal(t, names["joined"], ups[0].MV)
	require.Equal(t, names["joined.backfill_state"], ups[0].State)
	require.Equal(t, names["joined.1"], ups[1].MV)
	require.Equal(t, names["joined.1.backfill_state"], ups[1].State)
	require.Contains(t, names, "joined.backfill_job")
	require.Contains(t, names, "joined.log_store")
	require.Equal(t, []uint32{1, 2}, []uint32{ups[0].Table.ID, ups[1].Table.ID})
	j = open()
	require.Equal(t, ups, j.Upstreams())
	require.NoError(t, j.Close())
}
