package backfill_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

var (
	seedFlag    = flag.Uint64("seed", 0, "seed for randomized tests (0: testutil.DefaultSeed, or time based with -random-seeds)")
	crashesFlag = flag.Int("crashes", 10, "SIGKILLs of TestCrashRecovery")
)

const (
	childDirEnv    = "LSMSTATS_BACKFILL_CHILD_DIR"
	childActorsEnv = "LSMSTATS_BACKFILL_CHILD_ACTORS"
	childSeedEnv   = "LSMSTATS_BACKFILL_CHILD_SEED"
	// childObjStoreEnv is the URL of the crash child's object store (empty:
	// local disk); its credentials are in the AWS variables.
	childObjStoreEnv = "LSMSTATS_BACKFILL_CHILD_OBJSTORE"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(userChildDirEnv); dir != "" {
		testutil.ExitChild(userCrashChild(dir))
	}
	if dir := os.Getenv(snapChildDirEnv); dir != "" {
		actors, _ := strconv.Atoi(os.Getenv(childActorsEnv))
		seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
		testutil.ExitChild(snapshotCrashChild(dir, actors, seed))
	}
	if dir := os.Getenv(multiChildDirEnv); dir != "" {
		actors, _ := strconv.Atoi(os.Getenv(childActorsEnv))
		seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
		testutil.ExitChild(multiCrashChild(dir, actors, seed))
	}
	if dir := os.Getenv(childDirEnv); dir != "" {
		actors, _ := strconv.Atoi(os.Getenv(childActorsEnv))
		seed, _ := strconv.ParseUint(os.Getenv(childSeedEnv), 10, 64)
		*crashesFlag, _ = strconv.Atoi(os.Getenv("LSMSTATS_BACKFILL_CHILD_CRASHES"))
		testutil.ExitChild(crashChild(dir, os.Getenv(childObjStoreEnv), actors, seed))
	}
	// The data-driven files' object-store runs share one S3 server.
	goleak.VerifyTestMain(s3server.TestingM(m))
}

func testSeed(t testing.TB) uint64 { return testutil.Seed(t, "seed", *seedFlag) }

// crashParams is the workload of the crash test: churn before and during,
// small enough for many restarts, long enough for the crashes asked for:
// a run killed after 1 to 3 checkpoints and 20ms makes up to 10% of this
// job's checkpoints (16,000 rows made it to 98% in 10 runs, and a run that
// finishes the job cannot be killed).
func crashParams(seed uint64) workload.Params {
	p, _ := workload.Preset("mixed", 48000*max(1, *crashesFlag/10), 32, seed)
	p.BatchRows = 3000
	p.DuringSteps = 30
	return p
}

// openCrashJob opens the crash test's store in dir, with its SSTs in the
// object store of URL objURL if that is not empty, and its job.
func openCrashJob(dir, objURL string, actors int, seed uint64) (*lsm.Store, *backfill.Job, *workload.Generator, error) {
	opts := &lsm.Options{Logger: lsm.QuietLogger(nil), MemoryWatermark: 256 << 10}
	if objURL != "" {
		opts.ObjectStore = &objstore.StoreOptions{URL: objURL}
	}
	s, err := lsm.Open(dir, opts)
	if err != nil {
		return nil, nil, nil, err
	}
	p := crashParams(seed)
	g, err := workload.New(p)
	if err != nil {
		return nil, nil, nil, err
	}
	j, err := backfill.OpenJob(backfill.JobConfig{
		Store: s, Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
		Actors: actors, ChunkSize: 16, BarrierRows: 40, CheckpointEvery: 2,
		Source: genjob.Source{G: g}, Score: backfilltest.Oracles(genjob.Oracle{G: g}),
		OnCheckpoint: func(r backfill.Record) {
			fmt.Printf("R %d %s %s\n", r.Barrier, figure(r, "rowcount"), figure(r, "stats"))
		},
	})
	if err != nil {
		_ = s.Close()
		return nil, nil, nil, err
	}
	return s, j, g, nil
}

func figure(r backfill.Record, approach string) string {
	for _, f := range r.Figures {
		if f.Approach == approach {
			return strconv.FormatFloat(f.Pct, 'f', 2, 64)
		}
	}
	return "-"
}

// crashChild runs the job until it finishes or is killed, printing each
// checkpoint's displayed figures ("I" for the figure right after recovery).
func crashChild(dir, objURL string, actors int, seed uint64) error {
	s, j, _, err := openCrashJob(dir, objURL, actors, seed)
	if err != nil {
		return err
	}
	if r := j.Initial(); r != nil {
		fmt.Printf("I %d %s %s\n", r.Barrier, figure(*r, "rowcount"), figure(*r, "stats"))
	}
	if _, err := j.Run(context.Background()); err != nil {
		return err
	}
	fmt.Println("D")
	return errorsCombine(j.Close(), s.Close())
}

func errorsCombine(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestCrashRecovery kills a child process running the job with SIGKILL at
// random moments (at least -crashes times), restarts it (after the first
// crash with another actor count: a rescale), and finally lets it finish.
// The MV must equal the upstream table, the displayed figures must never
// decrease across restarts, and each restart must show a figure before its
// first new barrier.
func TestCrashRecovery(t *testing.T) { crashRecovery(t, "", *crashesFlag) }

// TestCrashRecoveryObjectStore is TestCrashRecovery with the store's SSTs
// in a bucket of the shared S3 server, with fewer crashes: a SIGKILL while
// an SST is uploaded, or while the job reads remote SSTs, loses nothing
// committed.
func TestCrashRecoveryObjectStore(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := "s3://" + srv.NewBucket(t) + "/crash?endpoint=" + srv.Endpoint + "&retry-for=30s"
	crashRecovery(t, url, min(*crashesFlag, 3))
}

// crashRecovery runs TestCrashRecovery with kills SIGKILLs, on the object
// store of objURL if that is not empty.
func crashRecovery(t *testing.T, objURL string, kills int) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 5))
	dir := t.TempDir()
	actors := 2
	last := map[string]float64{"rowcount": 0, "stats": 0}
	check := func(line string) {
		f := strings.Fields(line)
		for i, name := range []string{"rowcount", "stats"} {
			pct, err := strconv.ParseFloat(f[2+i], 64)
			require.NoError(t, err, line)
			require.GreaterOrEqual(t, pct, last[name], "displayed %s figure decreased: %s", name, line)
			last[name] = pct
		}
	}
	crashes, initials := 0, 0
	for run := 0; ; run++ {
		lines, done := runChild(t, dir, objURL, actors, seed, r, run < kills)
		for _, l := range lines {
			switch l[0] {
			case 'I':
				initials++
				check(l)
			case 'R':
				check(l)
			}
		}
		if done {
			break
		}
		crashes++
		if crashes == 1 {
			actors = 3 // rescale after the first crash
		}
		require.Less(t, run, 100, "the job does not finish")
	}
	require.GreaterOrEqual(t, crashes, kills)
	require.GreaterOrEqual(t, initials, 1, "no restart showed a figure before its first barrier")
	require.Equal(t, 100.0, last["stats"])
	require.Equal(t, 100.0, last["rowcount"])

	s, j, g, err := openCrashJob(dir, objURL, actors, seed)
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, j.Compare())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	// The upstream table is exactly the workload run without a crash to the
	// committed step: every restart resumed the generator from the table
	// (no replay), and it went on as if nothing had happened.
	straight, err := workload.New(crashParams(seed))
	require.NoError(t, err)
	straight.Replay(g.Step())
	var want int64
	for v := uint16(0); v < 32; v++ {
		it, err := s.NewIter(1, v, nil, nil)
		require.NoError(t, err)
		ok := it.First()
		straight.EachRow(v, func(pk, row []byte) {
			require.True(t, ok, "vnode %d: the table ends before pk %x", v, pk)
			require.Equal(t, pk, it.PK())
			require.Equal(t, row, it.Row())
			ok = it.Next()
			want++
		})
		require.False(t, ok, "vnode %d: the table has more rows than the workload", v)
		require.NoError(t, it.Close())
	}
	require.Equal(t, want, s.Stats().Live.Table(1).Rows)
	if objURL != "" {
		local, err := filepath.Glob(filepath.Join(dir, "db", "*.sst"))
		require.NoError(t, err)
		require.Empty(t, local, "SSTs on local disk in a store on an object store")
	}
	require.NoError(t, j.Close())
	t.Logf("%d crashes, %d restarts showed a figure at once", crashes, initials)
}

// runChild runs the child until it finishes, or kills it after a random
// time if kill is set. It returns the child's report lines and whether the
// job finished.
func runChild(t *testing.T, dir, objURL string, actors int, seed uint64, r *rand.Rand, kill bool) ([]string, bool) {
	c := testutil.StartChild(t, os.Stderr, childDirEnv+"="+dir, childObjStoreEnv+"="+objURL, childActorsEnv+"="+strconv.Itoa(actors),
		childSeedEnv+"="+strconv.FormatUint(seed, 10), "LSMSTATS_BACKFILL_CHILD_CRASHES="+strconv.Itoa(*crashesFlag))
	var lines []string
	add := func(l string) { lines = append(lines, l) }
	if kill {
		// Let the run make 1 to 3 checkpoints, then kill it within 20ms: at
		// a random point of a barrier, a commit or a recovery.
		target := 1 + r.IntN(3)
		c.ReadUntil(0, func(l string) bool {
			add(l)
			if l[0] == 'R' {
				target--
			}
			return target == 0 || l[0] == 'D' || l[0] == 'E'
		})
		c.KillAfter(t, time.Duration(r.IntN(20000))*time.Microsecond, add)
	} else {
		for l := range c.Lines() {
			add(l)
		}
	}
	end := c.Wait()
	for _, l := range lines {
		if strings.HasPrefix(l, "E ") {
			t.Fatalf("child failed: %s", l)
		}
	}
	finished := len(lines) > 0 && lines[len(lines)-1] == "D"
	if finished {
		require.NoError(t, end.Finished())
	}
	return lines, finished
}
