package torture

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/compaction"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var (
	killsFlag = flag.Int("torture-kills", 25, "SIGKILLs of TestTorture (make torture: 1000)")
	seedFlag  = flag.Uint64("torture-seed", 0, "seed of TestTorture (0: testutil.DefaultSeed, or time based with -random-seeds)")
)

const (
	childDirEnv  = "LSMSTATS_TORTURE_DIR"
	childSeedEnv = "LSMSTATS_TORTURE_SEED"
)

// The phases every torture run must land kills in.
var phases = []string{"buffering", "spill", "commit", "backfill", "gc", "compaction"}

func TestMain(m *testing.M) {
	if dir := os.Getenv(childDirEnv); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
		testutil.ExitChild(child(dir, seed))
	}
	goleak.VerifyTestMain(m)
}

// params is one job's workload: churn before and during the backfill, small
// barriers so that a job lasts many checkpoints.
func params(seed uint64) workload.Params {
	p, _ := workload.Preset("mixed", 16000, 32, seed)
	p.BatchRows = 4000
	p.DuringSteps = 120
	return p
}

func config(dir string, seed uint64, store *lsm.Options) bench.Config {
	if store == nil {
		store = &lsm.Options{Logger: lsm.QuietLogger(nil)}
	}
	return bench.Config{Dir: dir, Workload: params(seed), Actors: 2, ChunkSize: 32, BarrierRows: 64,
		CheckpointEvery: 2, Store: store}
}

// child runs the job, the upstream churn and a busy compaction policy until
// killed or finished, printing every phase change:
//
//	F <phase>         the pipeline (upstream, backfill, commit, progress)
//	S <phase>         the store (spilling, buffering, committing, gc-...)
//	+gc -gc           a GC and compaction round of the policy
//	+compaction ...   a Pebble compaction began / ended
//	C                 a checkpoint's progress was computed
//	D                 the job finished
func child(dir string, seed uint64) error {
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	emit := func(s string) {
		mu.Lock()
		out.WriteString(s)
		out.WriteByte('\n')
		out.Flush()
		mu.Unlock()
	}
	el := &pebble.EventListener{
		// Callbacks run under Pebble's mutex: they only write a line.
		CompactionBegin: func(pebble.CompactionInfo) { emit("+compaction") },
		CompactionEnd:   func(pebble.CompactionInfo) { emit("-compaction") },
	}
	cfg := config(dir, seed, &lsm.Options{Logger: lsm.QuietLogger(nil), MemoryWatermark: 12 << 10, EventListener: el,
		OnPhase: func(p string) { emit("S " + p) }})
	cfg.OnPhase = func(p string) { emit("F " + p) }
	cfg.OnCheckpoint = func(backfill.Record) { emit("C") }
	s, err := bench.Open(cfg)
	if err != nil {
		return err
	}
	policy, err := compaction.New(compaction.Config{Store: s.Store,
		Thresholds: compaction.Thresholds{VersionRatio: 1.05, DeleteShare: 0.05, TombstoneShare: 0.05, MinGarbage: 64},
		Rate:       -1, MaxRangesPerRound: 2, MaxVnodesPerRange: 8})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			emit("+gc")
			_, _ = policy.RunRound(ctx)
			emit("-gc")
			time.Sleep(2 * time.Millisecond)
		}
	}()
	_, err = s.Job.Run(ctx)
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	emit("D")
	return s.Close()
}

// state follows the child's lines; tags are the phases active now.
type state struct {
	fg                  string
	spill, commit, gc   bool
	compactions, checks int
}

func (st *state) apply(l string) {
	switch {
	case strings.HasPrefix(l, "F "):
		st.fg = l[2:]
		st.commit = st.fg == "commit"
	case l == "S spilling":
		st.spill = true
	case l == "S buffering":
		st.spill = false
	case l == "S committing":
		st.commit = true
	case l == "+gc":
		st.gc = true
	case l == "-gc":
		st.gc = false
	case l == "+compaction":
		st.compactions++
	case l == "-compaction":
		st.compactions = max(0, st.compactions-1)
	case l == "C":
		st.checks++
	}
}

func (st *state) tags() []string {
	var out []string
	switch st.fg {
	case "upstream":
		out = append(out, "buffering")
	case "backfill":
		out = append(out, "backfill")
	}
	if st.spill {
		out = append(out, "spill")
	}
	if st.commit {
		out = append(out, "commit")
	}
	if st.gc {
		out = append(out, "gc")
	}
	if st.compactions > 0 {
		out = append(out, "compaction")
	}
	return out
}

// TestTorture kills the child at random moments in every phase and checks
// the store after each restart; see the package doc.
func TestTorture(t *testing.T) {
	seed := testutil.Seed(t, "torture-seed", *seedFlag)
	r := rand.New(rand.NewPCG(seed, 17))
	hits := map[string]int{}
	missing := func() []string { return testutil.Missing(phases, hits) }
	base := t.TempDir()
	job := 0
	dir := filepath.Join(base, "job0")
	start := time.Now()
	kills, jobs := 0, 0
	for attempt := 0; kills < *killsFlag || len(missing()) > 0; attempt++ {
		require.Less(t, attempt, 3*(*killsFlag)+50, "too many attempts: hits %v", hits)
		target := phases[attempt%len(phases)]
		if kills >= *killsFlag {
			target = missing()[0]
		}
		jobSeed := seed + uint64(job)
		tags, finished := runChild(t, dir, jobSeed, target, r)
		if finished {
			checkFinished(t, dir, jobSeed)
			jobs++
			job++
			dir = filepath.Join(base, "job"+strconv.Itoa(job))
			continue
		}
		kills++
		for _, tag := range tags {
			hits[tag]++
		}
		checkAfterKill(t, dir, jobSeed)
	}
	names := make([]string, 0, len(hits))
	for k := range hits {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%d ", k, hits[k])
	}
	t.Logf("%d kills in %v (%d jobs finished); kills per phase (a kill counts for each active phase): %s",
		kills, time.Since(start).Round(time.Millisecond), jobs, b.String())
}

// runChild starts the child and, once target is active (after at least one
// checkpoint of this run), kills it after a short random delay. It returns
// the phases active at the kill, or finished if the job ended first.
func runChild(t *testing.T, dir string, seed uint64, target string, r *rand.Rand) ([]string, bool) {
	c := testutil.StartChild(t, os.Stderr, childDirEnv+"="+dir, childSeedEnv+"="+strconv.FormatUint(seed, 10))
	var st state
	finished := false
	handle := func(l string) {
		if strings.HasPrefix(l, "E ") {
			t.Fatalf("child failed: %s", l)
		}
		if l == "D" {
			finished = true
		}
		st.apply(l)
	}
	switch c.ReadUntil(10*time.Second, func(l string) bool {
		handle(l)
		return st.checks > 0 && slices.Contains(st.tags(), target)
	}) {
	case testutil.Matched:
		// Short phases: kill within a fraction of a millisecond.
		delay := time.Duration(r.IntN(400)) * time.Microsecond
		if target == "gc" || target == "compaction" {
			delay = time.Duration(r.IntN(2000)) * time.Microsecond
		}
		c.KillAfter(t, delay, handle)
	case testutil.TimedOut:
		// The target never came: kill wherever the child is.
		c.Kill(t)
		for l := range c.Lines() {
			handle(l)
		}
	}
	end := c.Wait()
	if finished {
		return nil, true
	}
	require.True(t, end.Killed, "child exited without finishing: %v", end.Err)
	return st.tags(), false
}

// checkAfterKill reopens the store and checks it against the workload
// replayed to the committed step.
func checkAfterKill(t *testing.T, dir string, seed uint64) {
	s, err := bench.Open(config(dir, seed, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	g, st := s.Gen, s.Store
	// The upstream table is the workload at the committed step.
	for v := uint16(0); v < 32; v++ {
		var want []string
		g.EachRow(v, func(pk, row []byte) { want = append(want, fmt.Sprintf("%x=%x", pk, row)) })
		got := scan(t, st, bench.UpstreamTable, v, nil)
		require.Equal(t, want, got, "upstream vnode %d at step %d", v, g.Step())
	}
	// Nothing above the committed epoch.
	c := st.CommittedEpoch()
	lo, _ := keys.TableSpan(bench.UpstreamTable)
	_, hi := keys.TableSpan(bench.MetaTable)
	it, err := lsminternal.DB(st).NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	for ok := it.First(); ok; ok = it.Next() {
		k, err := keys.Decode(it.Key())
		require.NoError(t, err)
		require.LessOrEqual(t, k.Version.Epoch(), c, "uncommitted version %s", k)
	}
	require.NoError(t, it.Close())
	// The MV is the upstream behind the cursors.
	if rec := s.Job.Initial(); rec != nil {
		for _, v := range rec.Vnodes {
			want := scan(t, st, bench.UpstreamTable, v.Vnode, nil)
			switch {
			case v.Finished:
			case v.Cursor == nil:
				want = nil
			default:
				want = scan(t, st, bench.UpstreamTable, v.Vnode, v.Cursor)
			}
			require.Equal(t, want, scan(t, st, bench.MVTable, v.Vnode, nil), "mv vnode %d (%s)", v.Vnode, v)
		}
	}
	rep, err := st.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
}

// scan lists a vnode's rows, those with pk <= upTo when it is set.
func scan(t *testing.T, s *lsm.Store, table uint32, vnode uint16, upTo []byte) []string {
	it, err := s.NewIter(table, vnode, nil, nil)
	require.NoError(t, err)
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		if upTo != nil && bytes.Compare(it.PK(), upTo) > 0 {
			break
		}
		out = append(out, fmt.Sprintf("%x=%x", it.PK(), it.Row()))
	}
	require.NoError(t, it.Close())
	return out
}

func checkFinished(t *testing.T, dir string, seed uint64) {
	s, err := bench.Open(config(dir, seed, nil))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.NoError(t, s.Job.Compare())
	rep, err := s.Store.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
}
