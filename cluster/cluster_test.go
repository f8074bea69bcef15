package cluster

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// Environment of a node run by the test binary as a child process.
const (
	envNodeDir  = "LSMSTATS_CLUSTER_NODE_DIR"
	envNodeURL  = "LSMSTATS_CLUSTER_NODE_URL"
	envNodeName = "LSMSTATS_CLUSTER_NODE_NAME"
	// envNodeBackup names the node's backup (every test node has one).
	envNodeBackup = "LSMSTATS_CLUSTER_NODE_BACKUP"
)

var clusterSeed = flag.Uint64("cluster-seed", 0, "seed of TestCluster (0: the fixed default, or a time-based one with -random-seeds)")

func TestMain(m *testing.M) {
	if dir := os.Getenv(envNodeDir); dir != "" {
		os.Exit(runChildNode(dir))
	}
	os.Exit(s3server.RunTests(m))
}

// runChildNode is a node process: the test's Process launches the test
// binary with the node's environment.
func runChildNode(dir string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	err := Serve(context.Background(), ServeConfig{
		Name: os.Getenv(envNodeName), Dir: dir, Log: log, Backup: os.Getenv(envNodeBackup),
		Store: &lsm.Options{Logger: lsm.QuietLogger(os.Stderr), ObjectStore: &objstore.StoreOptions{URL: os.Getenv(envNodeURL)}},
		Ready: func(addr string) { fmt.Println(ReadyLine(addr)) },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		return 1
	}
	return 0
}

// testCluster starts n node processes on a new bucket of the shared
// SeaweedFS server.
func testCluster(t testing.TB, n int, logw io.Writer) (map[string]Launcher, string) {
	return newTestCluster(t, n, logw, true)
}

// newTestCluster is testCluster, its nodes backed up or not.
func newTestCluster(t testing.TB, n int, logw io.Writer, backup bool) (map[string]Launcher, string) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := fmt.Sprintf("s3://%s/cluster?endpoint=%s&retry-for=30s", srv.NewBucket(t), srv.Endpoint)
	nodes := map[string]Launcher{}
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		p := testNode(t, name, url, logw)
		if !backup {
			p.Env = slices.DeleteFunc(p.Env, func(e string) bool { return strings.HasPrefix(e, envNodeBackup+"=") })
		}
		nodes[name] = p
	}
	return nodes, url
}

// testNode is a node process of the test binary, in a directory of its
// own, backed up under its name.
func testNode(t testing.TB, name, url string, logw io.Writer) *Process {
	return &Process{Args: []string{os.Args[0], "-test.run=^$"},
		Env: []string{envNodeDir + "=" + t.TempDir(), envNodeURL + "=" + url, envNodeName + "=" + name, envNodeBackup + "=test/" + name}, Log: logw}
}

// nodeDir is a test node's directory.
func nodeDir(p *Process) string {
	for _, e := range p.Env {
		if d, ok := strings.CutPrefix(e, envNodeDir+"="); ok {
			return d
		}
	}
	return ""
}

// TestCluster runs a backfill over 3 node processes on the real S3 server
// with its events at checkpoints chosen by the seed: a move of a vnode
// range (compacted into the bucket first: nothing copied); a node
// SIGKILLed and its directory deleted (its WAL and MANIFEST lost: it comes
// back from its backup in the bucket), whose vnodes go to the two live
// nodes at the next checkpoint (3 → 2; ReassignLost); a node added (2 → 3) and given ranges of the
// others a checkpoint later; a move; a node retired (3 → 2); a node added
// and filled again (2 → 3). After each event every node checks itself
// (Verify: every statistic against the data), and at every checkpoint the
// job's stats figure is held to the truth (a scan of every node's vnodes
// at the committed epoch); at the end every node's MV equals its upstream.
func TestCluster(t *testing.T) {
	seed := testutil.Seed(t, "cluster-seed", *clusterSeed)
	rng := rand.New(rand.NewPCG(seed, 0))
	rows := 20000 + rng.IntN(20000)
	if raceEnabled {
		rows /= 4
	}
	p, err := workload.Preset("mixed", rows, []int{16, 64, 256}[rng.IntN(3)], seed)
	require.NoError(t, err)
	p.BatchRows = p.Rows / 3
	p.Shape = []workload.Shape{workload.Hashed, workload.Sequential, workload.ParentChild}[rng.IntN(3)]
	t.Logf("workload: %d rows, %d vnodes, pk shape %s", p.Rows, p.VnodeCount, p.Shape)

	lw := newTestLog(t)
	nodes, url := testCluster(t, 3, lw)
	procs := map[string]*Process{}
	for name, l := range nodes {
		procs[name] = l.(*Process)
	}
	// The events, at checkpoints (1-based) chosen by the seed, in order.
	type event struct {
		at   int
		what string
	}
	events := []event{{2 + rng.IntN(2), "move"}, {4 + rng.IntN(2), "kill"}, {7, "add"}, {8, "fill"},
		{9 + rng.IntN(2), "move"}, {11, "retire"}, {13, "add"}, {14, "fill"}}
	ckpts := 0
	var errs []float64
	var shown []float64
	var checks []string
	added := 0
	pending := ""
	ctx := context.Background()
	check := func(c *Coordinator, what string) {
		res, err := c.Check(ctx)
		require.NoError(t, err)
		for name, r := range res {
			require.Empty(t, r.Problems, "after %s at checkpoint %d: node %s", what, ckpts, name)
		}
		checks = append(checks, what)
	}
	pick := func(c *Coordinator) string {
		names := sortedKeys(c.Vnodes())
		return names[rng.IntN(len(names))]
	}
	cfg := CoordinatorConfig{
		// About 30 checkpoints whatever the size, for the events at 2 to 14.
		Job:   JobSpec{Workload: p, Actors: 2, CheckpointEvery: 2, BarrierRows: max(16, p.Rows/(2*3*2*30))},
		Nodes: nodes, Truth: true, HeartbeatTimeout: time.Second, ReassignLost: true,
		Log: slog.New(slog.NewTextHandler(lw, nil)),
		OnCheckpoint: func(c Checkpoint) {
			ckpts++
			st := c.Figures["stats"]
			errs = append(errs, abs(st.Raw-c.Truth))
			shown = append(shown, st.Shown)
			require.LessOrEqual(t, st.Lower-1e-9, c.Truth, "checkpoint %d: the truth is below the stats bounds", ckpts)
			require.GreaterOrEqual(t, st.Upper+1e-9, c.Truth, "checkpoint %d: the truth is above the stats bounds", ckpts)
			if !c.Finished {
				require.Less(t, st.Shown, 100.0, "checkpoint %d: 100%% before the end", ckpts)
			}
		},
		OnStep: func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error {
			if !checkpoint {
				return nil
			}
			if pending != "" {
				// An event whose effect came at this checkpoint (a lost
				// node's vnodes reassigned, a node retired or caught up).
				check(c, pending)
				pending = ""
			}
			if len(events) == 0 || ckpts < events[0].at {
				return nil
			}
			ev := events[0]
			events = events[1:]
			vn := c.Vnodes()
			switch ev.what {
			case "move":
				from, to := pick(c), pick(c)
				for to == from || len(vn[from]) == 0 {
					from, to = pick(c), pick(c)
				}
				r := vn[from][0]
				r.Hi = r.Lo + max(1, (r.Hi-r.Lo)/2)
				// The first move compacts its range into the object store
				// first: it must copy nothing.
				compact := len(c.Moves()) == 0
				res, err := c.Move(ctx, from, to, r, MoveOptions{Compact: compact})
				require.NoError(t, err)
				if compact && res.Stats.LiveRows > 0 {
					require.Positive(t, res.Stats.SharedSSTs, "a compacted range moves by reference")
					require.Zero(t, res.Stats.CopiedVersions, "a compacted range copies no version")
				}
				t.Logf("checkpoint %d: moved %v %s → %s: %d shared SSTs (%d bytes) by reference, %d versions (%d bytes) copied, %d live rows",
					ckpts, r, from, to, res.Stats.SharedSSTs, res.Stats.SharedBytes, res.Stats.CopiedVersions, res.Stats.CopiedBytes, res.Stats.LiveRows)
			case "kill":
				victim := pick(c)
				t.Logf("checkpoint %d: SIGKILL %s, and its directory deleted", ckpts, victim)
				require.NoError(t, c.Kill(victim))
				require.NoError(t, os.RemoveAll(nodeDir(procs[victim])), "the directory of %s", victim)
				pending = "kill"
				return nil // the next step finds it dead; the checkpoint after, its vnodes go
			case "add": // 2 → 3
				require.Len(t, vn, 2, "nodes before an add")
				name := fmt.Sprintf("node-new-%d", added)
				added++
				procs[name] = testNode(t, name, url, lw)
				require.NoError(t, c.AddNode(ctx, name, procs[name]))
				t.Logf("checkpoint %d: %s added", ckpts, name)
				pending = "add"
				return nil // it catches up at the next step
			case "fill":
				name := fmt.Sprintf("node-new-%d", added-1)
				for _, from := range sortedKeys(vn) {
					if from == name || len(vn[from]) == 0 {
						continue
					}
					r := vn[from][len(vn[from])-1]
					r.Lo = r.Hi - max(1, (r.Hi-r.Lo)/3)
					_, err := c.Move(ctx, from, name, r, MoveOptions{})
					require.NoError(t, err)
				}
				t.Logf("checkpoint %d: %s filled: %v", ckpts, name, c.Vnodes())
			case "retire": // 3 → 2
				victim := pick(c)
				require.NoError(t, c.Retire(victim))
				t.Logf("checkpoint %d: %s to retire", ckpts, victim)
				pending = "retire"
				return nil // at the next checkpoint
			}
			check(c, ev.what)
			return nil
		},
	}
	c, err := NewCoordinator(ctx, cfg)
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	last, err := c.Run(ctx)
	require.NoError(t, err)
	require.True(t, last.Finished)
	require.Equal(t, 100.0, last.Figures["stats"].Shown)

	res, err := c.Check(ctx)
	require.NoError(t, err)
	var live int64
	for name, r := range res {
		require.Empty(t, r.Problems, "node %s at the end", name)
		require.True(t, r.MVMatches, "node %s: MV vs upstream", name)
		live += r.LiveRows
	}
	for i := 1; i < len(shown); i++ {
		require.GreaterOrEqual(t, shown[i], shown[i-1], "displayed figure went down at checkpoint %d", i+1)
	}
	var mean, worst float64
	for _, e := range errs {
		mean += e / float64(len(errs))
		worst = max(worst, e)
	}
	t.Logf("%d checkpoints, events %v, moves %d, losses %d; stats error mean %.3f pp, max %.3f pp; %d live rows scanned by Verify",
		ckpts, checks, len(c.Moves()), len(c.Losses()), mean, worst, live)
	require.Empty(t, events, "events left when the job finished")
	require.Len(t, c.Losses(), 1, "the killed node's loss")
	require.Contains(t, lw.String(), "store restored from its backup", "the killed node came back from its backup")
	require.True(t, c.Losses()[0].Reassigned, "the killed node's vnodes went to the live nodes")
	require.Len(t, c.Retired(), 2, "the killed node and the retired one left")
	require.Len(t, c.Vnodes(), 3, "nodes at the end")
	require.LessOrEqual(t, mean, 0.2, "stats error mean (pp)")
	require.LessOrEqual(t, worst, 1.0, "stats error max (pp)")
	shared := 0
	for _, m := range c.Moves() {
		shared += m.Stats.SharedSSTs
	}
	require.Positive(t, shared, "no move took a shared SST by reference")
}

// testLog collects the log lines of a test's coordinator and node
// processes (written by several goroutines), and prints them if the test
// fails.
type testLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func newTestLog(t testing.TB) *testLog {
	l := &testLog{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log:\n%s", l.String())
		}
	})
	return l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
