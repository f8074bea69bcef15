package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
)

// The backfill command is a supervisor and a worker. The supervisor starts
// the worker — this binary again, with --worker — reads its progress as JSON
// lines, draws the bars, kills it with SIGKILL at the barriers of --crash-at
// and restarts it (with --rescale-to actors after the first crash) until the
// job finishes. The worker opens the store, recovers the job from the
// committed state and runs it.

type intList []int

func (l *intList) String() string { return fmt.Sprint(*l) }
func (l *intList) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		*l = append(*l, v)
	}
	return nil
}

// rateChanges is the repeatable --rate-change-at PCT:N flag.
type rateChanges []backfill.RateChange

func (l *rateChanges) String() string { return fmt.Sprint(*l) }
func (l *rateChanges) Set(s string) error {
	pct, n, ok := strings.Cut(s, ":")
	if !ok {
		return errors.Newf("%q: want PCT:ROWS_PER_S, e.g. 40:25000", s)
	}
	at, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
	if err != nil || at < 0 || at > 100 {
		return errors.Newf("%q: the percentage must be a number from 0 to 100", s)
	}
	limit, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
	if err != nil || limit < 0 || math.IsInf(limit, 0) || math.IsNaN(limit) {
		return errors.Newf("%q: the limit must be a number of rows/s >= 0 (0: none)", s)
	}
	*l = append(*l, backfill.RateChange{AtPercent: at, Limit: limit})
	return nil
}

type backfillFlags struct {
	workload                                 string
	rows, vnodes, actors                     int
	rowsList                                 intList
	upstreams                                int
	mode                                     string
	snapshotOrder                            backfill.SnapshotOrder
	seed                                     uint64
	zipf                                     float64
	pkShape                                  string
	children                                 int
	updateFrac, deleteFrac                   float64
	deleteOrder                              string
	updateDuring, deleteDuring, insertDuring float64
	chunkSize, barrierRows, checkpointEvery  int
	duringSteps                              int
	crashAt                                  intList
	rescaleTo                                int
	dir, jsonPath, plotPath                  string
	bars                                     string
	worker                                   bool
	rateLimit                                float64
	rateChanges                              rateChanges
	metricsAddr                              string
	bucketBudget                             int
	noTruth                                  bool
	objectStore                              string
	nodes                                    int
	killNodeAt, moveAt                       intList
	onNodeLoss                               string
	loseDisk                                 bool
}

func parseBackfillFlags(args []string, stderr io.Writer) (*backfillFlags, *flag.FlagSet, error) {
	f := &backfillFlags{}
	fs := flag.NewFlagSet("backfill", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.workload, "workload", "mixed", "named workload: "+strings.Join(workload.PresetNames(), ", ")+" (the flags below override its fields)")
	f.rowsList = intList{1000000}
	fs.Func("rows", "rows loaded into the upstream table; with several upstream tables, a comma-separated count per table (e.g. 1000000,20000,5000), or one count for all (default 1000000)", func(v string) error {
		var l intList
		if err := l.Set(v); err != nil {
			return errors.Newf("%q: want a row count or a comma-separated list of them", v)
		}
		f.rowsList = l
		return nil
	})
	fs.StringVar(&f.mode, "mode", "arrangement", "kind of backfill: arrangement, or snapshot (a snapshot at a pinned epoch while the upstream's changes go to a log store, then the log store, then the upstream; its truth scans the tables)")
	fs.TextVar(&f.snapshotOrder, "snapshot-order", backfill.VnodeOrder, "order in which each actor reads its vnodes: vnode (one vnode after another: the upstream in its storage order) or interleaved (one row of each in turn, as RisingWave's arrangement backfill; two to three times the cost per row here)")
	fs.IntVar(&f.upstreams, "upstreams", 0, "upstream tables of the job, read by the same actors (0: one per --rows count); each gets the workload with its --rows count and seed+i")
	fs.IntVar(&f.vnodes, "vnodes", 256, "vnodes of the upstream table")
	fs.IntVar(&f.actors, "actors", 2, "backfill actors")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fs.Float64Var(&f.zipf, "zipf", 0, "zipf skew s of the distribution keys (0: uniform; hashed pk shape only)")
	fs.StringVar(&f.pkShape, "pk-shape", "hashed", "pk shape of the upstream table: hashed, sequential, parent-child, low-card, string, timeseries")
	fs.IntVar(&f.children, "children", 7, "largest number of children per parent (pk shape parent-child)")
	fs.Float64Var(&f.updateFrac, "update-frac", 0, "fraction of rows updated before the backfill")
	fs.Float64Var(&f.deleteFrac, "delete-frac", 0, "fraction of rows deleted before the backfill")
	fs.StringVar(&f.deleteOrder, "delete-order", "random", "order of the deletes before the backfill: random, prefix or suffix")
	fs.Float64Var(&f.updateDuring, "update-during", 0, "fraction of rows updated during the backfill")
	fs.Float64Var(&f.deleteDuring, "delete-during", 0, "fraction of rows deleted during the backfill")
	fs.Float64Var(&f.insertDuring, "insert-during", 0, "fraction of rows inserted during the backfill")
	fs.IntVar(&f.chunkSize, "chunk-size", 256, "rows per chunk")
	fs.IntVar(&f.barrierRows, "barrier-rows", 2048, "snapshot rows per actor per barrier (every barrier, checkpoint or not)")
	fs.IntVar(&f.checkpointEvery, "checkpoint-every", 1, "every n-th barrier is a checkpoint")
	fs.IntVar(&f.duringSteps, "during-steps", 0, "epochs over which the churn during the backfill is spread (0: about the backfill's length)")
	fs.Var(&f.crashAt, "crash-at", "SIGKILL the working process at this checkpoint barrier, then restart it (repeatable)")
	fs.IntVar(&f.rescaleTo, "rescale-to", 0, "after the first crash, restart with this many actors")
	fs.StringVar(&f.dir, "dir", "", "keep the store in this directory (default: a temporary directory, removed at the end)")
	fs.StringVar(&f.jsonPath, "json", "", "write the run's JSON report to this file")
	fs.StringVar(&f.plotPath, "plot", "", "write a PNG plot of progress per barrier to this file")
	fs.StringVar(&f.bars, "bars", "auto", "live progress bars: auto (on a terminal), on, off")
	fs.Float64Var(&f.rateLimit, "rate-limit", 0, "limit the backfill's snapshot reads to this many rows/s over all actors (0: none)")
	fs.Var(&f.rateChanges, "rate-change-at", "PCT:N: from the checkpoint whose stats figure reaches PCT%, limit the snapshot reads to N rows/s (0: none); repeatable")
	fs.IntVar(&f.bucketBudget, "stats-bucket-budget", 0, "live statistics buckets per table, about (lsm.Options.StatsBucketBudget: bounds their memory whatever the rows, at the cost of wider estimate bounds; 0: the default, 65536)")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics of the running job and its store at http://ADDR/metrics (e.g. 127.0.0.1:9187; port 0 picks one)")
	fs.BoolVar(&f.noTruth, "no-truth", false, "run without the truth (the workload model's count of live rows behind the cursors): the figures, bounds, ETA and JSON are the same, the truth and the errors against it absent. Without it, the truth of each checkpoint is computed on a goroutine of its own, beside the job, which does not wait for it")
	fs.StringVar(&f.objectStore, "object-store", "", "keep the store's SSTs in this object store: s3://BUCKET/PREFIX?endpoint=URL&region=R "+
		"(credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); the store's directory keeps the rest")
	fs.IntVar(&f.nodes, "nodes", 0, "run the job over this many store nodes (lsmstats node processes, with this process their coordinator) on --object-store (0: one embedded store)")
	fs.Var(&f.killNodeAt, "kill-node-at", "with --nodes: SIGKILL a node after this checkpoint (repeatable); the coordinator restarts it from its last checkpoint")
	fs.BoolVar(&f.loseDisk, "lose-disk", false, "with --kill-node-at: also delete the killed node's directory (its WAL, MANIFEST and catalog); it comes back from its backup in the object store")
	fs.StringVar(&f.onNodeLoss, "on-node-loss", "reassign", "with --nodes: what the coordinator does with a node that stops answering, once restarted on its directory from its last checkpoint: reassign (its vnodes go to the live nodes at the next checkpoint, and it leaves) or restart (it goes on with its vnodes)")
	fs.Var(&f.moveAt, "move-at", "with --nodes: after this checkpoint, move half of the vnodes of the node with the most to the node with the fewest (repeatable)")
	fs.BoolVar(&f.worker, "worker", false, "internal: run as the supervised worker")
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	if fs.NArg() > 0 {
		return nil, nil, errors.Newf("unexpected arguments %q", fs.Args())
	}
	if f.mode != "arrangement" && f.mode != "snapshot" {
		return nil, nil, errors.Newf("--mode %q: want arrangement or snapshot", f.mode)
	}
	if f.upstreams < 0 {
		return nil, nil, errors.Newf("--upstreams %d: want a count >= 1 (0: one per --rows count)", f.upstreams)
	}
	if f.upstreams == 0 {
		f.upstreams = len(f.rowsList)
	}
	if len(f.rowsList) == 1 && f.upstreams > 1 {
		f.rowsList = slices.Repeat(f.rowsList, f.upstreams)
	}
	if len(f.rowsList) != f.upstreams {
		return nil, nil, errors.Newf("--rows has %d counts for --upstreams %d: give one count, or one per table", len(f.rowsList), f.upstreams)
	}
	for _, n := range f.rowsList {
		if n < 0 {
			return nil, nil, errors.Newf("--rows %d: want a count >= 0", n)
		}
	}
	f.rows = f.rowsList[0]
	return f, fs, nil
}

// params resolves the workload: the preset, then every flag given
// explicitly.
func (f *backfillFlags) params(fs *flag.FlagSet) (workload.Params, error) {
	p, err := workload.Preset(f.workload, f.rows, f.vnodes, f.seed)
	if err != nil {
		return p, err
	}
	shape, err := workload.ParseShape(f.pkShape)
	if err != nil {
		return p, err
	}
	p.Shape, p.Children = shape, f.children
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "zipf":
			p.Zipf = f.zipf
		case "update-frac":
			p.UpdateFrac = f.updateFrac
		case "delete-frac":
			p.DeleteFrac = f.deleteFrac
		case "delete-order":
			p.DeleteOrder = f.deleteOrder
		case "update-during":
			p.UpdateDuring = f.updateDuring
		case "delete-during":
			p.DeleteDuring = f.deleteDuring
		case "insert-during":
			p.InsertDuring = f.insertDuring
		}
	})
	p.DuringSteps = f.duringSteps
	if p.DuringSteps == 0 {
		// Spread the churn over about the backfill's length: one step per
		// barrier, each actor reading --barrier-rows at every barrier.
		rows := 0
		for _, n := range f.rowsList {
			rows += n
		}
		p.DuringSteps = max(1, rows/(max(1, f.actors)*max(1, f.barrierRows)))
	}
	if f.chunkSize < 1 || f.barrierRows < 1 || f.actors < 1 || f.checkpointEvery < 1 {
		return p, errors.New("--chunk-size, --barrier-rows, --actors and --checkpoint-every must be positive")
	}
	if err := keys.CheckVnodeCount(f.vnodes); err != nil {
		return p, errors.Newf("--vnodes %d: want 1 to %d", f.vnodes, keys.MaxVnodeCount)
	}
	if f.bucketBudget < 0 {
		return p, errors.Newf("--stats-bucket-budget %d: want a number of buckets >= 0 (0: the default)", f.bucketBudget)
	}
	if f.rateLimit < 0 || math.IsNaN(f.rateLimit) || math.IsInf(f.rateLimit, 0) {
		return p, errors.Newf("--rate-limit %v: want rows/s >= 0 (0: none)", f.rateLimit)
	}
	// What the worker's workload.New would refuse, as a failed run (a
	// delete order, fractions, zipf on a shape other than hashed).
	if err := p.Check(); err != nil {
		return p, err
	}
	for _, out := range []struct{ flag, path string }{{"json", f.jsonPath}, {"plot", f.plotPath}} {
		if err := prepareOutputPath(out.flag, out.path); err != nil {
			return p, err
		}
	}
	return p, nil
}

// prepareOutputPath makes an output file's directory (--json, --plot), as
// a cluster run's report always did, and refuses a path that could not be
// written, a directory or one under a file, before the run instead of at
// its end.
func prepareOutputPath(flagName, path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return errors.Newf("--%s %s: a directory, want a file", flagName, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return errors.Newf("--%s %s: its directory: %v", flagName, path, err)
	}
	return nil
}

// jobMode returns the --mode's backfill.JobMode.
func (f *backfillFlags) jobMode() backfill.JobMode {
	if f.mode == "snapshot" {
		return backfill.ModeSnapshot
	}
	return backfill.ModeArrangement
}

// upstreamParams returns the workloads of a job over several upstream
// tables (nil for one): p with each table's --rows count and the seed
// plus the table's index.
func (f *backfillFlags) upstreamParams(p workload.Params) []workload.Params {
	if len(f.rowsList) < 2 {
		return nil
	}
	out := make([]workload.Params, len(f.rowsList))
	for i, n := range f.rowsList {
		out[i] = p
		out[i].Rows, out[i].Seed = n, p.Seed+uint64(i)
	}
	return out
}

// event is one line of the worker's output.
type event struct {
	T string `json:"t"` // start, load, initial, ckpt, done
	// load
	Step, Of uint64 `json:",omitempty"`
	// initial, ckpt
	Rec *recordJSON `json:"rec,omitempty"`
	// ckpt: the state bytes this worker process wrote so far (Job.StateBytes)
	StateBytes     int64 `json:"state_bytes,omitempty"`
	StatsOnlyBytes int64 `json:"stats_only_bytes,omitempty"`
	// truth: a checkpoint's truth, computed beside the job after its ckpt
	// line (bench.TruthConcurrent)
	Truth *truthEventJSON `json:"truth,omitempty"`
	// done (LoadS is bench.Summary's Load, for a reader of the worker's
	// lines: the supervisor times the run itself)
	MVMatches bool    `json:"mv_matches,omitempty"`
	MVError   string  `json:"mv_error,omitempty"`
	Epoch     uint64  `json:"epoch,omitempty"`
	LoadS     float64 `json:"load_s,omitempty"`
	// ckpt, done: the time the job's backfill has run in this worker
	// (bench.Session.Backfilled; at done, bench.Summary's Backfill): from
	// its start after the load or the recovery, the workload model's time
	// taken out, as BenchmarkScale times it
	BackfillS float64 `json:"backfill_s,omitempty"`
	// ckpt, truth, done: what the truth cost this worker so far
	// (bench.TruthCost)
	TruthS      float64 `json:"truth_s,omitempty"`
	TruthCPUS   float64 `json:"truth_cpu_s,omitempty"`
	TruthScored int     `json:"truth_scored,omitempty"`
	TruthSkip   int     `json:"truth_skipped,omitempty"`
}

// truthEventJSON is a truth line: the record it is of (barrier, epoch,
// the reopened job's first figure or not) and its truth.
type truthEventJSON struct {
	Barrier      uint64    `json:"barrier"`
	Epoch        uint64    `json:"epoch"`
	Reopened     bool      `json:"reopened,omitempty"`
	Truth        float64   `json:"truth"`
	Upstreams    []float64 `json:"upstreams,omitempty"`
	VnodeErrMean float64   `json:"vnode_err_mean_pp"`
	VnodeErrMax  float64   `json:"vnode_err_max_pp"`
}

type recordJSON struct {
	Barrier      uint64            `json:"barrier"`
	Epoch        uint64            `json:"epoch"`
	TimeNS       int64             `json:"time_unix_ns"`
	RateLimit    float64           `json:"rate_limit"`
	ETA          etaJSON           `json:"eta"`
	Truth        float64           `json:"truth"`
	Finished     bool              `json:"finished"`
	Figures      []backfill.Figure `json:"figures"`
	VnodeErrMean float64           `json:"vnode_err_mean_pp"`
	VnodeErrMax  float64           `json:"vnode_err_max_pp"`
	Rows         uint64            `json:"snapshot_rows"`
	// Upstreams are each upstream table's figures and truth (one entry
	// for a job over one table).
	Upstreams []backfill.UpstreamProgress `json:"upstreams,omitempty"`
	// Phase, LogConsumed and LogPending: a snapshot backfill's phase and
	// log rows (backfill.Record).
	Phase       string `json:"phase,omitempty"`
	LogConsumed uint64 `json:"log_consumed,omitempty"`
	LogPending  uint64 `json:"log_pending,omitempty"`
	// LSM is the worker's LSM at the checkpoint; nil where the worker
	// could not read it.
	LSM *lsmJSON `json:"lsm,omitempty"`
}

// lsmJSON is the shape of a worker's LSM and its background work at a
// checkpoint, from Pebble's metrics, so that a report shows a checkpoint's
// rate and ETA beside the flushes and compactions that share the machine
// with the job. The counts and times are the worker process's since it
// opened the store: a restarted worker counts again from 0.
type lsmJSON struct {
	// Flushes and Compactions are those finished, Flushing and Compacting
	// those running; FlushS and CompactionS the time the finished ones
	// took (Pebble's flush work time and compaction duration).
	Flushes     int64   `json:"flushes"`
	Flushing    int64   `json:"flushing"`
	FlushS      float64 `json:"flush_s"`
	Compactions int64   `json:"compactions"`
	Compacting  int64   `json:"compacting"`
	CompactionS float64 `json:"compaction_s"`
	// L0Sublevels is L0's depth: Pebble compacts L0 into the base level
	// once twice its depth reaches the store's L0CompactionThreshold.
	L0Sublevels int32 `json:"l0_sublevels"`
	// WrittenBytes and BusyS are what the ETA reads (lsm.Store.Background):
	// the bytes the store took in, and the time at least one flush or
	// compaction ran, the running ones to now.
	WrittenBytes int64   `json:"written_bytes"`
	BusyS        float64 `json:"busy_s"`
}

// lsmOf reads the store's LSM for a checkpoint's line; nil once it is
// closed.
func lsmOf(st *lsm.Store) *lsmJSON {
	m, err := st.PebbleMetrics()
	if err != nil {
		return nil
	}
	l := &lsmJSON{Flushes: m.Flush.Count, Flushing: m.Flush.NumInProgress, FlushS: m.Flush.WriteThroughput.WorkDuration.Seconds(),
		Compactions: m.Compact.Count, Compacting: m.Compact.NumInProgress, CompactionS: m.Compact.Duration.Seconds(),
		L0Sublevels: m.Levels[0].Sublevels}
	written, busy := st.Background()
	l.WrittenBytes, l.BusyS = written, busy.Seconds()
	return l
}

// etaJSON is a record's ETA; the durations are in seconds, -1 when there
// is no ETA to show (Status warming) or no finite one.
type etaJSON struct {
	Status     string  `json:"status"`
	Shown      string  `json:"shown"`
	RemainingS float64 `json:"remaining_s"`
	LowS       float64 `json:"low_s"`
	HighS      float64 `json:"high_s"`
	RowsPerS   float64 `json:"snapshot_rows_per_s"`
	ChurnPerS  float64 `json:"upstream_churn_rows_per_s"`
}

func etaOf(f backfill.ETAForecast) etaJSON {
	rem, lo, hi := f.Seconds()
	fin := func(x float64) float64 {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return -1
		}
		return x
	}
	return etaJSON{Status: f.Status.String(), Shown: f.String(), RemainingS: fin(rem), LowS: fin(lo), HighS: fin(hi),
		RowsPerS: f.Rate, ChurnPerS: f.Churn}
}

func toJSON(r backfill.Record) *recordJSON {
	out := &recordJSON{Barrier: r.Barrier, Epoch: r.Epoch, TimeNS: r.Time.UnixNano(), RateLimit: r.RateLimit, ETA: etaOf(r.ETA),
		Truth: r.Truth, Finished: r.Finished, Figures: r.Figures, VnodeErrMean: r.VnodeErrMean, VnodeErrMax: r.VnodeErrMax,
		Rows: r.SnapshotRows, Upstreams: r.Upstreams, Phase: r.Phase, LogConsumed: r.LogConsumed, LogPending: r.LogPending}
	return out
}

func (r *recordJSON) figure(approach string) backfill.Figure {
	return backfill.FigureOf(r.Figures, approach)
}

func backfillCmd(args []string, stdout, stderr io.Writer) (int, error) {
	f, fs, err := parseBackfillFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, nil
		}
		return usageError(err)
	}
	p, err := f.params(fs)
	if err != nil {
		return usageError(err)
	}
	if f.nodes == 0 && (len(f.killNodeAt) > 0 || len(f.moveAt) > 0 || f.loseDisk) {
		return usageError(errors.New("--kill-node-at, --move-at and --lose-disk need --nodes"))
	}
	if f.loseDisk && len(f.killNodeAt) == 0 {
		return usageError(errors.New("--lose-disk needs --kill-node-at: it deletes the killed node's directory"))
	}
	if f.nodes > 0 {
		return runCluster(f, p, stdout, stderr) // a node caps its actors at its vnodes
	}
	// One embedded job: each actor reads at least one vnode.
	for _, a := range []struct {
		name string
		n    int
	}{{"--actors", f.actors}, {"--rescale-to", f.rescaleTo}} {
		if a.n > f.vnodes {
			return usageError(errors.Newf("%s %d is more than --vnodes %d: each actor reads at least one vnode", a.name, a.n, f.vnodes))
		}
	}
	if f.worker {
		// SIGINT or SIGTERM (a terminal's Ctrl-C reaches the worker too, or
		// its supervisor forwards it) cancels the job: it stops at a clean
		// point, the store closes at its last checkpoint, and the worker
		// exits quietly with exitInterrupted (the supervisor says why).
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err := runWorker(ctx, f, p, stdout, os.Stderr)
		if err != nil && ctx.Err() != nil {
			return exitInterrupted, nil
		}
		// exitOK: run classifies the error (corruption or not).
		return exitOK, err
	}
	return supervise(f, args, p, stdout, stderr)
}

// ---- worker ------------------------------------------------------------

// runWorker opens (or recovers) the job in f.dir and runs it to the end
// through bench.Run, reporting on stdout.
func runWorker(ctx context.Context, f *backfillFlags, p workload.Params, stdout, stderr io.Writer) error {
	enc := json.NewEncoder(stdout)
	var mu sync.Mutex // the job's lines and the truth's come from two goroutines
	emit := func(e event) {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(e); err != nil {
			os.Exit(exitWorkerLost) // the supervisor is gone
		}
	}
	var s *bench.Session
	costOf := func(e *event, c bench.TruthCost) {
		e.TruthS, e.TruthCPUS, e.TruthScored, e.TruthSkip = c.Time.Seconds(), c.CPU.Seconds(), c.Scored, c.Skipped
	}
	truthMode := bench.TruthConcurrent
	if f.noTruth {
		truthMode = bench.TruthOff
	}
	gauge := newTruthGauge()
	cfg := bench.Config{
		Truth: truthMode,
		OnTruth: func(r bench.TruthResult) {
			e := event{T: "truth", Truth: &truthEventJSON{Barrier: r.Barrier, Epoch: r.Epoch, Reopened: r.Reopened, Truth: r.Truth,
				Upstreams: r.Upstreams, VnodeErrMean: r.VnodeErrMean, VnodeErrMax: r.VnodeErrMax}}
			costOf(&e, r.SoFar)
			emit(e)
			gauge.set(r.Barrier, r.Truth)
		},
		Dir: f.dir, Workload: p, Upstreams: f.upstreamParams(p), Mode: f.jobMode(), SnapshotOrder: f.snapshotOrder, Actors: f.actors, ChunkSize: f.chunkSize, BarrierRows: f.barrierRows,
		CheckpointEvery: f.checkpointEvery, RateLimit: f.rateLimit, RateChanges: f.rateChanges,
		Store: &lsm.Options{Logger: cliLogger{w: stderr}, StatsBucketBudget: f.bucketBudget, ObjectStore: objectStoreOptions(f.objectStore)},
		OnOpen: func(opened *bench.Session) error {
			s = opened
			if f.metricsAddr != "" {
				// The supervisor holds the listener (its address stays
				// across restarts) and hands it to each worker as file
				// descriptor 3.
				metrics, err := serveMetrics(os.NewFile(3, "metrics listener"), s.Store, s.Job, gauge)
				if err != nil {
					return err
				}
				s.OnClose(metrics.close)
			}
			return nil
		},
		OnLoadStep: func(step, last uint64) { emit(event{T: "load", Step: step, Of: last}) },
		OnCheckpoint: func(r backfill.Record) {
			if r.Reopened {
				// The figure of the job recovered from the store, before
				// its first new checkpoint.
				emit(event{T: "initial", Rec: toJSON(r)})
				return
			}
			// Each checkpoint carries the state bytes so far: a killed
			// worker's bytes count up to its last reported checkpoint.
			e := event{T: "ckpt", Rec: toJSON(r), BackfillS: s.Backfilled().Seconds()}
			e.Rec.LSM = lsmOf(s.Store)
			e.StateBytes, e.StatsOnlyBytes = s.Job.StateBytes()
			costOf(&e, s.TruthCost())
			emit(e)
		},
	}
	sum, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	emit(event{T: "done", Epoch: sum.Epoch, LoadS: sum.Load.Seconds(), BackfillS: sum.Backfill.Seconds(),
		MVMatches: sum.MVMatches, MVError: sum.MVError,
		TruthS: sum.Truth.Time.Seconds(), TruthCPUS: sum.Truth.CPU.Seconds(), TruthScored: sum.Truth.Scored, TruthSkip: sum.Truth.Skipped})
	return nil
}

// ---- supervisor --------------------------------------------------------

// report is the JSON file of a run. With --no-truth (Parameters' "truth"
// false) every field that is the truth or an error against it is null:
// the barriers' and recoveries' truth, vnode_err_mean_pp and
// vnode_err_max_pp, their upstreams' truth, Error and Timings.Truth; the
// figures, their bounds, the ETA, the costs and the timings are all there.
type report struct {
	Parameters     map[string]any `json:"parameters"`
	Barriers       []barrierJSON  `json:"barriers"`
	Recoveries     []barrierJSON  `json:"recoveries"`
	MVMatches      bool           `json:"mv_matches_upstream"`
	MVError        string         `json:"mv_error,omitempty"`
	Crashes        int            `json:"crashes"`
	KilledBy       []string       `json:"killed_by"`
	CommittedEpoch uint64         `json:"committed_epoch"`
	// Error is each approach's error against the truth; null without it.
	Error   map[string]*bench.ErrorStats `json:"error"`
	Cost    map[string]costJSON          `json:"cost"`
	Timings timingsJSON                  `json:"timings"`
	// ETA is the accuracy of the ETA after 10% progress (the truth, or the
	// stats figure without it), against the time that remained at each
	// checkpoint with the crashes' downtime left out (Timings.DowntimeS:
	// from a killed worker's last checkpoint to the recovered job's first
	// figure, which no forecast can know of), and ETAWall against the
	// wall time that remained, downtime included.
	ETA     bench.ETAStats `json:"eta_after_10pct"`
	ETAWall bench.ETAStats `json:"eta_after_10pct_wall"`
	// MetricsAddr is where --metrics-addr served the metrics.
	MetricsAddr string `json:"metrics_addr,omitempty"`
}

type barrierJSON struct {
	Barrier uint64 `json:"barrier"`
	Epoch   uint64 `json:"epoch"`
	// Truth is the truth in percent; null when it is absent (--no-truth,
	// or a worker killed before it was computed).
	Truth    *float64 `json:"truth"`
	RowCount float64  `json:"rowcount"`
	Stats    float64  `json:"stats"`
	// StatsBounds bound the truth (the stats approach's bounds).
	StatsBounds       *backfill.Bounds `json:"stats_bounds,omitempty"`
	DisplayedRowCount string           `json:"displayed_rowcount"`
	DisplayedStats    string           `json:"displayed_stats"`
	Finished          bool             `json:"finished"`
	// VnodeErrMeanPP and VnodeErrMaxPP are the stats figure's mean and
	// largest error over the vnodes against their truth, in percentage
	// points; null with the truth.
	VnodeErrMeanPP *float64 `json:"vnode_err_mean_pp"`
	VnodeErrMaxPP  *float64 `json:"vnode_err_max_pp"`
	SnapshotRows   uint64   `json:"snapshot_rows"`
	RateLimit      float64  `json:"rate_limit"`
	TimeNS         int64    `json:"time_unix_ns"`
	ETA            etaJSON  `json:"eta"`
	// ActualRemainingS is the time from this checkpoint to the job's
	// end, known once it finished, and ActualRunningS the same with the
	// crashes' downtime after it left out.
	ActualRemainingS float64 `json:"actual_remaining_s"`
	ActualRunningS   float64 `json:"actual_running_s"`
	// Phase is a snapshot backfill's phase, and Upstreams every table's
	// figures and truth.
	Phase     string         `json:"phase,omitempty"`
	Upstreams []upstreamJSON `json:"upstreams,omitempty"`
	// LSM is the worker's LSM at the checkpoint: its flushes and
	// compactions so far and running, and L0's depth.
	LSM *lsmJSON `json:"lsm,omitempty"`
}

// upstreamJSON is one upstream table's figures in the report; its truth
// (which takes the place of backfill.UpstreamProgress's -1 for none) is
// null when absent, as a barrier's is.
type upstreamJSON struct {
	backfill.UpstreamProgress
	Truth *float64 `json:"truth"`
}

func upstreamsOf(us []backfill.UpstreamProgress) []upstreamJSON {
	if us == nil {
		return nil
	}
	out := make([]upstreamJSON, len(us))
	for i, u := range us {
		out[i] = upstreamJSON{UpstreamProgress: u, Truth: truthOf(u.Truth)}
	}
	return out
}

// costJSON is an approach's cost per checkpoint barrier (the report's
// barriers, across every worker run).
type costJSON struct {
	ProgressNSPerBarrier float64 `json:"progress_cpu_ns_per_barrier"`
	// StateBytesPerBarrier is the state bytes written up to the reported
	// checkpoints of every run over their number.
	StateBytesPerBarrier float64 `json:"state_bytes_per_barrier"`
}

type timingsJSON struct {
	TotalS    float64   `json:"total_s"`
	LoadS     float64   `json:"load_s"`
	BackfillS float64   `json:"backfill_s"`
	RunsS     []float64 `json:"runs_s"`
	// RowsPerS is the snapshot rows over BackfillS, which holds the
	// crashes, the recoveries and the end of the run (the MV's check).
	// The rows are those read by this command: RowsBefore, the rows a job
	// resumed from --dir had read before it, are not counted.
	RowsPerS   float64   `json:"snapshot_rows_per_s"`
	RowsBefore uint64    `json:"snapshot_rows_before,omitempty"`
	RecoveryMS []float64 `json:"recovery_ms"`
	// JobBackfillS is the time the job's backfill ran, summed over the
	// workers as each measured it (bench.Session.Backfilled: from the
	// start after the load or the recovery to the end, or to a killed
	// worker's last checkpoint; the workload model's time taken out), and
	// JobRowsPerS the snapshot rows over it: BenchmarkScale's rows/s.
	JobBackfillS float64 `json:"job_backfill_s"`
	JobRowsPerS  float64 `json:"job_snapshot_rows_per_s"`
	// DowntimeS is the time from each killed worker's last checkpoint to
	// the recovered job's first figure, summed: what the ETA cannot know.
	DowntimeS float64 `json:"downtime_s"`
	// Truth is what the truth cost beside the job; null with --no-truth.
	Truth *truthTimingsJSON `json:"truth"`
}

// truthTimingsJSON is what computing the truth beside the job cost, over
// the workers.
type truthTimingsJSON struct {
	// WallS is the wall time of the truth's goroutine (on a busy machine
	// it counts waiting for a core) and CPUS its CPU time.
	WallS float64 `json:"wall_s"`
	CPUS  float64 `json:"cpu_s"`
	// Checkpoints is the checkpoints it scored and Skipped those it
	// skipped to keep up (a snapshot backfill's scans).
	Checkpoints int `json:"checkpoints"`
	Skipped     int `json:"skipped"`
}

func barrierOf(r *recordJSON) barrierJSON {
	rc, st := r.figure("rowcount"), r.figure("stats")
	return barrierJSON{Barrier: r.Barrier, Epoch: r.Epoch, Truth: truthOf(r.Truth), RowCount: rc.Raw, Stats: st.Raw,
		StatsBounds: st.Bounds, DisplayedRowCount: rc.Shown, DisplayedStats: st.Shown, Finished: r.Finished,
		VnodeErrMeanPP: vnodeErrOf(r.Truth, r.VnodeErrMean), VnodeErrMaxPP: vnodeErrOf(r.Truth, r.VnodeErrMax),
		SnapshotRows: r.Rows, RateLimit: r.RateLimit, TimeNS: r.TimeNS, ETA: r.ETA, Phase: r.Phase, Upstreams: upstreamsOf(r.Upstreams),
		LSM: r.LSM}
}

// vnodeErrOf is a vnode error for the report: nil without a truth.
func vnodeErrOf(truth, err float64) *float64 {
	if truth < 0 {
		return nil
	}
	return &err
}

// truthValue is a report's truth, -1 when absent.
func truthValue(t *float64) float64 {
	if t == nil {
		return -1
	}
	return *t
}

// truthOf is a truth for the report: nil when there is none (negative).
func truthOf(t float64) *float64 {
	if t < 0 {
		return nil
	}
	return &t
}

// truthKey names the record a truth line is of.
type truthKey struct {
	barrier, epoch uint64
	reopened       bool
}

// supervisor is a supervised backfill across its worker runs: what the
// runs reported so far, and what is left to do.
type supervisor struct {
	f              *backfillFlags
	args           []string
	p              workload.Params
	stdout, stderr io.Writer

	dir, exe    string
	metricsFile *os.File // the metrics listener handed to each worker
	ui          *progressUI
	rep         *report
	start       time.Time

	crashAt []int // the crash points still to come, in order
	actors  int   // the actors of the next run
	records []*recordJSON
	// The state bytes of every run and of the one in progress, up to
	// its last reported checkpoint.
	stateBytes, statsOnlyBytes int64
	runState, runStatsOnly     int64
	runStart                   time.Time
	done                       *event
	// The records of the run in progress start at runFirst in records
	// (and rep.Barriers); its recovery, if any, is rep.Recoveries' last
	// (recovered). A truth line may come before its record's line:
	// pending holds it until then.
	runFirst  int
	recovered bool
	pending   map[truthKey]*truthEventJSON
	// The job's backfill time and the truth's cost in the run in progress
	// (the last a worker reported) and in the runs before.
	runBackfill, backfillS float64
	runTruth, truth        event
	lastCkpt               time.Time // of the run in progress
	downtimes              []downtime
	// rowsBefore are the snapshot rows the job had read before this
	// command (a --dir with a job in progress or done): the rates count
	// the rows read since.
	rowsBefore uint64
}

// downtime is the time from a killed worker's last checkpoint to the
// recovered job's first figure.
type downtime struct{ from, to time.Time }

// supervise runs workers until one reports the job done, killing and
// restarting them at the crash points, then reports the run.
func supervise(f *backfillFlags, args []string, p workload.Params, stdout, stderr io.Writer) (int, error) {
	sv := &supervisor{f: f, args: args, p: p, stdout: stdout, stderr: stderr, actors: f.actors}
	cleanup, err := sv.prepare()
	defer cleanup()
	if err != nil {
		return exitError, err
	}
	// SIGINT (Ctrl-C) or SIGTERM: the worker is asked to stop at a clean
	// point (interrupt), and the run ends with exitInterrupted; the
	// temporary store, if any, is removed on the way out.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sv.ui = newProgressUI(f.bars, !f.noTruth, stdout)
	defer sv.ui.stop()
	sv.rep = &report{Parameters: parameters(f, p), Error: map[string]*bench.ErrorStats{}}
	sv.pending = map[truthKey]*truthEventJSON{}
	closeMetrics, err := sv.listenMetrics()
	defer closeMetrics()
	if err != nil {
		return exitError, err
	}
	sv.crashAt = slices.Sorted(slices.Values(f.crashAt))
	sv.start = time.Now()
	for run := 0; sv.done == nil; run++ {
		if ctx.Err() != nil {
			return sv.interrupted()
		}
		if run > len(f.crashAt)+3 {
			return exitError, errors.New("the worker keeps dying without finishing")
		}
		if code, err := sv.runOnce(ctx); code != exitOK || err != nil {
			return code, err
		}
	}
	sv.ui.finish()
	return sv.conclude()
}

// prepare finds the store's directory (--dir, or a temporary one, which
// the returned function removes) and this executable, the workers'.
func (sv *supervisor) prepare() (cleanup func(), err error) {
	cleanup = func() {}
	sv.dir = sv.f.dir
	if sv.dir == "" {
		tmp, err := os.MkdirTemp("", "lsmstats-backfill-")
		if err != nil {
			return cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(tmp) }
		sv.dir = tmp
	}
	sv.exe, err = os.Executable()
	return cleanup, err
}

// listenMetrics opens the --metrics-addr listener, if any: each worker
// serves on a duplicate of it, so that scrapes during a restart wait in
// its backlog for the next worker. The returned function closes it.
func (sv *supervisor) listenMetrics() (closeAll func(), err error) {
	closeAll = func() {}
	if sv.f.metricsAddr == "" {
		return closeAll, nil
	}
	l, err := net.Listen("tcp", sv.f.metricsAddr)
	if err != nil {
		return closeAll, errors.Wrap(err, "--metrics-addr")
	}
	closeAll = func() { _ = l.Close() }
	if sv.metricsFile, err = l.(*net.TCPListener).File(); err != nil {
		return closeAll, errors.Wrap(err, "--metrics-addr")
	}
	closeAll = func() {
		_ = sv.metricsFile.Close()
		_ = l.Close()
	}
	sv.rep.MetricsAddr = l.Addr().String()
	fmt.Fprintf(sv.stdout, "metrics: http://%s/metrics\n", sv.rep.MetricsAddr)
	return closeAll, nil
}

// interrupted ends an interrupted run, saying where its store is.
func (sv *supervisor) interrupted() (int, error) {
	where := "the temporary store was removed"
	if sv.f.dir != "" {
		where = fmt.Sprintf("the store in %s keeps its last checkpoint; the same command resumes the backfill", sv.f.dir)
	}
	return exitInterrupted, errors.Newf("interrupted: %s", where)
}

// runOnce runs one worker until it exits or is killed at a crash point;
// exitOK with no error means that the supervisor goes on (with the next
// worker, unless this one reported the job done).
func (sv *supervisor) runOnce(ctx context.Context) (int, error) {
	cmd, out, err := sv.startWorker()
	if err != nil {
		return exitError, err
	}
	exited := make(chan struct{})
	go interrupt(ctx, cmd.Process, exited, sv.stderr)
	sv.runState, sv.runStatsOnly = 0, 0
	sv.runFirst, sv.recovered = len(sv.records), false
	sv.runBackfill, sv.runTruth = 0, event{}
	clear(sv.pending)
	killed, err := sv.follow(out, cmd.Process)
	if err != nil {
		return exitError, err
	}
	werr := cmd.Wait()
	close(exited)
	if ctx.Err() != nil && sv.done == nil {
		return sv.interrupted()
	}
	sv.stateBytes += sv.runState
	sv.statsOnlyBytes += sv.runStatsOnly
	sv.backfillS += sv.runBackfill
	sv.truth.TruthS += sv.runTruth.TruthS
	sv.truth.TruthCPUS += sv.runTruth.TruthCPUS
	sv.truth.TruthScored += sv.runTruth.TruthScored
	sv.truth.TruthSkip += sv.runTruth.TruthSkip
	sv.rep.Timings.RunsS = append(sv.rep.Timings.RunsS, time.Since(sv.runStart).Seconds())
	return sv.ended(killed, werr)
}

// startWorker starts a worker on the store with the actors of this run.
func (sv *supervisor) startWorker() (*exec.Cmd, io.Reader, error) {
	// The workload must not change across restarts: pin what the
	// supervisor resolved (--during-steps depends on --actors).
	wargs := append(append([]string(nil), sv.args...), "--worker", "--dir", sv.dir, "--actors", strconv.Itoa(sv.actors),
		"--during-steps", strconv.Itoa(sv.p.DuringSteps))
	cmd := exec.Command(sv.exe, append([]string{"backfill"}, wargs...)...)
	cmd.Stderr = sv.stderr
	if sv.metricsFile != nil {
		cmd.ExtraFiles = []*os.File{sv.metricsFile} // fd 3
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	sv.runStart = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	return cmd, out, nil
}

// follow reads a worker's lines until it ends, or kills it (SIGKILL) at
// the next crash point; it reports whether it killed it. At a crash point
// it waits for that checkpoint's truth (computed beside the job, it comes
// right after its checkpoint's line), up to the worker's next line. The
// lines of a killed worker still in the pipe are read for the truths they
// hold: the checkpoints after the crash point are the next worker's to
// report.
func (sv *supervisor) follow(out io.Reader, worker *os.Process) (killed bool, err error) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	crashing := false // at a crash point, waiting for its truth
	kill := func() error {
		// The worker goes on after reporting: the kill lands in the
		// next barrier's work.
		crashing, killed = false, true
		return worker.Signal(syscall.SIGKILL)
	}
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return killed, errors.Wrapf(err, "worker output %q", sc.Text())
		}
		switch {
		case killed:
			if e.T == "truth" {
				sv.handle(e)
			}
			continue
		case crashing && e.T != "truth":
			// The next checkpoint came first: it is the next worker's.
			if err := kill(); err != nil {
				return true, err
			}
			continue
		}
		crashing = sv.handle(e) || crashing
		if crashing && (!sv.withTruth() || sv.rep.Barriers[len(sv.rep.Barriers)-1].Truth != nil) {
			if err := kill(); err != nil {
				return true, err
			}
		}
	}
	return killed, nil
}

// withTruth reports whether the run computes the truth.
func (sv *supervisor) withTruth() bool { return !sv.f.noTruth }

// handle takes one line of a worker into the report and the display; it
// reports whether the line is a checkpoint at a crash point.
func (sv *supervisor) handle(e event) (crash bool) {
	rep := sv.rep
	switch e.T {
	case "load":
		sv.ui.load(e.Step, e.Of)
		if e.Step >= e.Of {
			rep.Timings.LoadS = time.Since(sv.start).Seconds()
		}
	case "initial":
		if len(sv.records) == 0 {
			sv.rowsBefore = e.Rec.Rows
		}
		if !sv.lastCkpt.IsZero() {
			sv.downtimes = append(sv.downtimes, downtime{sv.lastCkpt, time.Unix(0, e.Rec.TimeNS)})
		}
		sv.takePending(e.Rec, true)
		rep.Recoveries = append(rep.Recoveries, barrierOf(e.Rec))
		sv.recovered = true
		rep.Timings.RecoveryMS = append(rep.Timings.RecoveryMS, float64(time.Since(sv.runStart).Milliseconds()))
		sv.ui.update(e.Rec, true)
	case "ckpt":
		sv.takePending(e.Rec, false)
		sv.records = append(sv.records, e.Rec)
		sv.runState, sv.runStatsOnly = e.StateBytes, e.StatsOnlyBytes
		sv.runBackfill, sv.lastCkpt = e.BackfillS, time.Unix(0, e.Rec.TimeNS)
		sv.costSoFar(e)
		rep.Barriers = append(rep.Barriers, barrierOf(e.Rec))
		sv.ui.update(e.Rec, false)
		if len(sv.crashAt) > 0 && int(e.Rec.Barrier) >= sv.crashAt[0] && !e.Rec.Finished {
			sv.crashAt = sv.crashAt[1:]
			return true
		}
	case "truth":
		sv.costSoFar(e)
		if t := e.Truth; t != nil {
			sv.takeTruth(t)
		}
	case "done":
		sv.done = &e
		sv.runBackfill = e.BackfillS
		sv.costSoFar(e)
	}
	return false
}

// costSoFar keeps the truth's cost in the run in progress, as the worker
// reported it last (its lines may come out of order: the largest).
func (sv *supervisor) costSoFar(e event) {
	if e.TruthScored+e.TruthSkip >= sv.runTruth.TruthScored+sv.runTruth.TruthSkip {
		sv.runTruth.TruthS = max(sv.runTruth.TruthS, e.TruthS)
		sv.runTruth.TruthCPUS = max(sv.runTruth.TruthCPUS, e.TruthCPUS)
		sv.runTruth.TruthScored, sv.runTruth.TruthSkip = e.TruthScored, e.TruthSkip
	}
}

// takeTruth sets a truth in its record of the run in progress, or keeps it
// until the record's line comes.
func (sv *supervisor) takeTruth(t *truthEventJSON) {
	key := truthKey{t.Barrier, t.Epoch, t.Reopened}
	if t.Reopened {
		if n := len(sv.rep.Recoveries); sv.recovered && n > 0 {
			if b := &sv.rep.Recoveries[n-1]; b.Barrier == t.Barrier && b.Epoch == t.Epoch {
				setTruth(b, nil, t)
				return
			}
		}
		sv.pending[key] = t
		return
	}
	for i := len(sv.records) - 1; i >= sv.runFirst; i-- {
		if r := sv.records[i]; r.Barrier == t.Barrier && r.Epoch == t.Epoch {
			setTruth(&sv.rep.Barriers[i], r, t)
			sv.ui.truth(r.Barrier, t.Truth)
			return
		}
	}
	sv.pending[key] = t
}

// takePending sets the truth that came before its record, if any.
func (sv *supervisor) takePending(r *recordJSON, reopened bool) {
	key := truthKey{r.Barrier, r.Epoch, reopened}
	if t, ok := sv.pending[key]; ok {
		delete(sv.pending, key)
		var b barrierJSON
		setTruth(&b, r, t)
	}
}

// setTruth sets a truth line's truth in a record (if not nil) and its
// barrier's entry in the report.
func setTruth(b *barrierJSON, r *recordJSON, t *truthEventJSON) {
	if r != nil {
		r.Truth, r.VnodeErrMean, r.VnodeErrMax = t.Truth, t.VnodeErrMean, t.VnodeErrMax
		if len(t.Upstreams) == len(r.Upstreams) {
			for u := range r.Upstreams {
				r.Upstreams[u].Truth = t.Upstreams[u]
			}
		}
	}
	b.Truth = truthOf(t.Truth)
	b.VnodeErrMeanPP, b.VnodeErrMaxPP = vnodeErrOf(t.Truth, t.VnodeErrMean), vnodeErrOf(t.Truth, t.VnodeErrMax)
	if len(t.Upstreams) == len(b.Upstreams) {
		b.Upstreams = slices.Clone(b.Upstreams)
		for u := range b.Upstreams {
			b.Upstreams[u].Truth = truthOf(t.Upstreams[u])
		}
	}
}

// ended classifies a worker's exit: our kill is a crash (the next worker
// recovers, with --rescale-to actors after the first), a fatal or corrupt
// store ends the run with the worker's code, and any other exit without
// the job done is an error.
func (sv *supervisor) ended(killed bool, werr error) (int, error) {
	var ee *exec.ExitError
	switch {
	case killed:
		if errors.As(werr, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				sv.rep.KilledBy = append(sv.rep.KilledBy, ws.Signal().String())
			}
		}
		sv.rep.Crashes++
		sv.ui.crash(sv.rep.Crashes)
		if sv.rep.Crashes == 1 && sv.f.rescaleTo > 0 {
			sv.actors = sv.f.rescaleTo
		}
	case werr != nil:
		if errors.As(werr, &ee) {
			switch ee.ExitCode() {
			case exitFatal:
				return exitFatal, errors.New("the worker ended on a fatal error in Pebble (its reason is above)")
			case exitCorrupt:
				return exitCorrupt, errors.New("the worker found the store corrupt (its error is above)")
			case exitError:
				return exitError, errors.New("the worker failed (its error is above)")
			}
		}
		return exitError, errors.Wrap(werr, "worker failed")
	case sv.done == nil:
		return exitError, errors.New("worker ended without finishing")
	}
	return exitOK, nil
}

// conclude completes the report from every run, prints its summary, and
// writes the JSON report and the plot; an MV that differs from the
// upstream ends the run with exitMVMismatch.
func (sv *supervisor) conclude() (int, error) {
	rep, f := sv.rep, sv.f
	rep.MVMatches, rep.MVError, rep.CommittedEpoch = sv.done.MVMatches, sv.done.MVError, sv.done.Epoch
	rep.Timings.TotalS = time.Since(sv.start).Seconds()
	// The backfill's time includes its crashes and recoveries.
	rep.Timings.BackfillS = rep.Timings.TotalS - rep.Timings.LoadS
	var rows uint64
	for _, r := range sv.records {
		rows = max(rows, r.Rows)
	}
	rows -= min(rows, sv.rowsBefore)
	rep.Timings.RowsBefore = sv.rowsBefore
	if rep.Timings.BackfillS > 0 {
		rep.Timings.RowsPerS = float64(rows) / rep.Timings.BackfillS
	}
	rep.Timings.JobBackfillS = sv.backfillS
	if sv.backfillS > 0 {
		rep.Timings.JobRowsPerS = float64(rows) / sv.backfillS
	}
	for _, d := range sv.downtimes {
		rep.Timings.DowntimeS += d.to.Sub(d.from).Seconds()
	}
	rep.Error, rep.Cost = summarize(sv.records, sv.stateBytes, sv.statsOnlyBytes)
	if sv.withTruth() {
		rep.Timings.Truth = &truthTimingsJSON{WallS: sv.truth.TruthS, CPUS: sv.truth.TruthCPUS,
			Checkpoints: sv.truth.TruthScored, Skipped: sv.truth.TruthSkip}
	} else {
		rep.Error = nil // no error against a truth: null
	}
	rep.ETA, rep.ETAWall = etaAccuracy(rep.Barriers, sv.downtimes)
	printSummary(sv.stdout, rep)
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return exitError, err
		}
		if err := os.WriteFile(f.jsonPath, append(b, '\n'), 0o644); err != nil {
			return exitError, err
		}
	}
	if f.plotPath != "" {
		if err := writePlot(f.plotPath, rep); err != nil {
			return exitError, err
		}
	}
	if !rep.MVMatches {
		fmt.Fprintf(sv.stderr, "lsmstats backfill: the MV does not match the upstream table: %s\n", rep.MVError)
		return exitMVMismatch, nil
	}
	return exitOK, nil
}

// workerStopGrace is how long an interrupted worker has to stop at a clean
// point before it is killed.
const workerStopGrace = 30 * time.Second

// interrupt forwards an interruption (ctx done) to the worker, which stops
// at a clean point; a worker that has not exited after workerStopGrace is
// killed: it recovers from its last checkpoint like after a crash.
func interrupt(ctx context.Context, worker *os.Process, exited <-chan struct{}, stderr io.Writer) {
	select {
	case <-exited:
		return
	case <-ctx.Done():
	}
	fmt.Fprintln(stderr, "lsmstats backfill: interrupted; stopping the worker")
	_ = worker.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(workerStopGrace):
		fmt.Fprintf(stderr, "lsmstats backfill: the worker did not stop within %s; killing it\n", workerStopGrace)
		_ = worker.Kill()
	}
}

// etaAccuracy fills each barrier's actual remaining time (to the first
// finished barrier), with and without the downtimes after it, and
// compares the ETA after 10% progress (bench.ETAPointsOf) with both:
// running against the time with the downtimes left out, wall with them.
// A barrier whose ETA the report cannot hold (none shown, or unbounded:
// -1) is no point.
func etaAccuracy(barriers []barrierJSON, downtimes []downtime) (running, wall bench.ETAStats) {
	// The running clock stops during each downtime.
	runningTime := func(t time.Time) time.Time {
		for _, d := range downtimes {
			if !t.After(d.from) {
				break
			}
			t = t.Add(-min(t.Sub(d.from), d.to.Sub(d.from)))
		}
		return t
	}
	running, end := etaStats(barriers, runningTime)
	if end.IsZero() {
		return bench.ETAStats{}, bench.ETAStats{} // not finished
	}
	wall, wallEnd := etaStats(barriers, func(t time.Time) time.Time { return t })
	for i := range barriers {
		t := time.Unix(0, barriers[i].TimeNS)
		barriers[i].ActualRunningS = max(0, float64(end.Sub(runningTime(t)))/1e9)
		barriers[i].ActualRemainingS = max(0, float64(wallEnd.Sub(t))/1e9)
	}
	return running, wall
}

// etaStats compares each barrier's ETA after 10% progress with the time
// that remained on clock, and returns the job's end on that clock.
func etaStats(barriers []barrierJSON, clock func(time.Time) time.Time) (bench.ETAStats, time.Time) {
	cs := make([]bench.ETACheckpoint, len(barriers))
	for i, b := range barriers {
		cs[i] = bench.ETACheckpoint{Time: clock(time.Unix(0, b.TimeNS)), Finished: b.Finished, Truth: truthValue(b.Truth), Stats: b.Stats}
		if b.ETA.RemainingS >= 0 {
			sec := func(s float64) time.Duration {
				if s < 0 {
					return backfill.ETAUnbounded
				}
				return time.Duration(s * 1e9)
			}
			cs[i].ETA = backfill.ETAForecast{Status: backfill.ETARunning, Remaining: sec(b.ETA.RemainingS), Low: sec(b.ETA.LowS), High: sec(b.ETA.HighS)}
		}
	}
	pts, end, ok := bench.ETAPointsOf(cs)
	if !ok {
		return bench.ETAStats{}, time.Time{}
	}
	return bench.SummarizeETA(pts, 0.1), end
}

// summarize tallies the checkpoints of every run as bench does a run's
// (bench.Tally): each approach's errors, and its cost per checkpoint, the
// progress CPU time and the state bytes (summed over every run, each up to
// its last reported checkpoint) over the same checkpoints.
func summarize(records []*recordJSON, stateBytes, statsOnlyBytes int64) (map[string]*bench.ErrorStats, map[string]costJSON) {
	t := bench.Tally{Errors: map[string]*bench.ErrorStats{}}
	for _, r := range records {
		t.Add(r.Figures, r.Truth)
	}
	cpu, _ := t.ProgressNanos()
	return t.Errors, map[string]costJSON{
		"rowcount": {ProgressNSPerBarrier: cpu["rowcount"], StateBytesPerBarrier: t.PerCheckpoint(float64(stateBytes))},
		"stats":    {ProgressNSPerBarrier: cpu["stats"], StateBytesPerBarrier: t.PerCheckpoint(float64(statsOnlyBytes))},
	}
}

// objectStoreName names the object store of URL in the report: its URL
// as objstore prints it (no credentials), "" for none, or the URL as given
// if it does not parse (the worker's Open says what is wrong with it).
func objectStoreName(url string) string {
	if url == "" {
		return ""
	}
	c, err := objstore.ParseURL(url)
	if err != nil {
		return url
	}
	return c.String()
}

func parameters(f *backfillFlags, p workload.Params) map[string]any {
	return map[string]any{
		"workload": f.workload, "mode": f.mode, "snapshot_order": f.snapshotOrder.String(), "rows": p.Rows, "upstream_rows": []int(f.rowsList), "vnodes": p.VnodeCount, "actors": f.actors, "seed": p.Seed,
		"pk_shape": p.Shape, "children": p.Children, "zipf": p.Zipf, "update_frac": p.UpdateFrac, "delete_frac": p.DeleteFrac, "delete_order": p.DeleteOrder,
		"update_during": p.UpdateDuring, "delete_during": p.DeleteDuring, "insert_during": p.InsertDuring,
		"during_steps": p.DuringSteps, "chunk_size": f.chunkSize, "barrier_rows": f.barrierRows,
		"checkpoint_every": f.checkpointEvery, "crash_at": []int(f.crashAt), "rescale_to": f.rescaleTo,
		"rate_limit": f.rateLimit, "rate_change_at": []backfill.RateChange(f.rateChanges), "truth": !f.noTruth,
		"object_store": objectStoreName(f.objectStore),
	}
}

func printSummary(w io.Writer, rep *report) {
	fmt.Fprintf(w, "\n%-9s %12s %12s %22s %22s\n", "approach", "mean error", "max error", "progress CPU/barrier", "state bytes/barrier")
	for _, a := range []string{"rowcount", "stats"} {
		e, c := rep.Error[a], rep.Cost[a]
		switch {
		case e != nil:
			fmt.Fprintf(w, "%-9s %9.3f pp %9.3f pp %19.1f µs %22.0f\n", a, e.MeanPP, e.MaxPP, c.ProgressNSPerBarrier/1e3, c.StateBytesPerBarrier)
		case len(rep.Error) == 0 && c != (costJSON{}):
			// No truth: no error against it.
			fmt.Fprintf(w, "%-9s %12s %12s %19.1f µs %22.0f\n", a, "—", "—", c.ProgressNSPerBarrier/1e3, c.StateBytesPerBarrier)
		}
	}
	rc, st := rep.Error["rowcount"], rep.Error["stats"]
	if rc != nil && st != nil {
		closer, other, a, b := "stats", "row-count", st, rc
		if rc.MeanPP < st.MeanPP {
			closer, other, a, b = "row-count", "stats", rc, st
		}
		ratio := "none: it was exact at every checkpoint"
		switch {
		case a.MeanPP > 0:
			ratio = fmt.Sprintf("%.0f× smaller", b.MeanPP/a.MeanPP)
		case a.MaxPP > 0:
			ratio = "none on average"
		}
		fmt.Fprintf(w, "\nThe %s approach was closer to the truth: mean error %.3f pp vs %.3f pp (%s), max %.3f pp vs %.3f pp, than the %s approach.\n",
			closer, a.MeanPP, b.MeanPP, ratio, a.MaxPP, b.MaxPP, other)
	}
	match := "yes"
	if !rep.MVMatches {
		match = "NO: " + rep.MVError
	}
	fmt.Fprintf(w, "%s, %s (%s showed a figure before the first barrier after it); MV equals upstream: %s\n",
		plural(len(rep.Barriers), "checkpoint"), plural(rep.Crashes, "crash"), plural(len(rep.Recoveries), "recovery"), match)
	tm := rep.Timings
	fmt.Fprintf(w, "time: %.1fs total, %.1fs load, %.1fs backfill with its crashes, recoveries and the MV's check, %.0f snapshot rows/s\n",
		tm.TotalS, tm.LoadS, tm.BackfillS, tm.RowsPerS)
	fmt.Fprintf(w, "the job's backfill ran %.1fs (in its workers, from the start to the end or the last checkpoint before a crash; the workload model's time left out, as BenchmarkScale times it): %.0f snapshot rows/s\n",
		tm.JobBackfillS, tm.JobRowsPerS)
	if tm.RowsBefore > 0 {
		fmt.Fprintf(w, "the job resumed from --dir with %s snapshot rows read by an earlier command: the rates count the rows read since\n",
			thousands(float64(tm.RowsBefore)))
	}
	switch {
	case rep.Parameters["truth"] == false:
		fmt.Fprintln(w, "truth: none (--no-truth): the job ran without the workload model's count, and no error against it is computed")
	case tm.Truth != nil && tm.Truth.Checkpoints+tm.Truth.Skipped > 0:
		tt := tm.Truth
		share := ""
		if tm.JobBackfillS > 0 {
			share = fmt.Sprintf(", %.1f%% of the job's backfill time", 100*tt.WallS/tm.JobBackfillS)
		}
		skipped := ""
		if tt.Skipped > 0 {
			skipped = fmt.Sprintf(" (%s skipped to keep up)", plural(tt.Skipped, "checkpoint"))
		}
		fmt.Fprintf(w, "truth: computed beside the job, which did not wait for it, in %.2fs (%.2fs of CPU) for %s%s%s\n",
			tt.WallS, tt.CPUS, plural(tt.Checkpoints, "checkpoint"), skipped, share)
	}
	printETA(w, rep)
}

// printETA prints the ETA against the actual remaining time at a few
// checkpoints, and its accuracy after 10% progress.
func printETA(w io.Writer, rep *report) {
	e := rep.ETA
	if e.N == 0 {
		fmt.Fprintln(w, "ETA: no checkpoint after 10% progress showed one")
		return
	}
	down := rep.Timings.DowntimeS > 0
	if down {
		fmt.Fprintf(w, "ETA after 10%% progress, against the time that remained less the crashes' downtime (%.1fs, which no forecast knows of): median error %.1f%%, p90 %.1f%%, actual time inside the interval at %.0f%% of %s; against the wall time: median %.1f%%, p90 %.1f%%, inside at %.0f%%\n",
			rep.Timings.DowntimeS, 100*e.MedianErr, 100*e.P90Err, 100*e.Coverage, plural(e.N, "checkpoint"),
			100*rep.ETAWall.MedianErr, 100*rep.ETAWall.P90Err, 100*rep.ETAWall.Coverage)
	} else {
		fmt.Fprintf(w, "ETA after 10%% progress: median error %.1f%%, p90 %.1f%%, actual time inside the interval at %.0f%% of %s\n",
			100*e.MedianErr, 100*e.P90Err, 100*e.Coverage, plural(e.N, "checkpoint"))
	}
	progress := "truth"
	if rep.Parameters["truth"] == false {
		progress = "stats"
	}
	fmt.Fprintf(w, "%8s %9s  %-44s %9s", "barrier", progress, "ETA", "actual")
	if down {
		fmt.Fprintf(w, " %12s", "less downtime")
	}
	fmt.Fprintln(w)
	next := 0.0
	for _, b := range rep.Barriers {
		pct := truthValue(b.Truth)
		if pct < 0 {
			pct = b.Stats
		}
		if b.Finished || b.ETA.RemainingS < 0 || pct < next {
			continue
		}
		next = pct + 20
		fmt.Fprintf(w, "%8d %8.2f%%  %-44s %9s", b.Barrier, pct, b.ETA.Shown,
			backfill.FormatETA(time.Duration(b.ActualRemainingS*1e9)))
		if down {
			fmt.Fprintf(w, " %12s", backfill.FormatETA(time.Duration(b.ActualRunningS*1e9)))
		}
		fmt.Fprintln(w)
	}
}

// plural renders n and a noun in its singular or plural form.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	switch {
	case strings.HasSuffix(noun, "sh"):
		noun += "es"
	case strings.HasSuffix(noun, "ry"):
		noun = strings.TrimSuffix(noun, "y") + "ies"
	default:
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}
