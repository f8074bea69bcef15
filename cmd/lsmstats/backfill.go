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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/workload"
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
	objectStore                              string
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
	fs.StringVar(&f.objectStore, "object-store", "", "keep the store's SSTs in this object store: s3://BUCKET/PREFIX?endpoint=URL&region=R "+
		"(credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); the store's directory keeps the rest")
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
	switch p.DeleteOrder {
	case "", "random", "prefix", "suffix":
	default:
		// The worker's workload.New would refuse it too, as a failed run.
		return p, errors.Newf("--delete-order %q is not random, prefix or suffix", p.DeleteOrder)
	}
	if f.chunkSize < 1 || f.barrierRows < 1 || f.actors < 1 || f.checkpointEvery < 1 {
		return p, errors.New("--chunk-size, --barrier-rows, --actors and --checkpoint-every must be positive")
	}
	if f.bucketBudget < 0 {
		return p, errors.Newf("--stats-bucket-budget %d: want a number of buckets >= 0 (0: the default)", f.bucketBudget)
	}
	if f.rateLimit < 0 || math.IsNaN(f.rateLimit) || math.IsInf(f.rateLimit, 0) {
		return p, errors.Newf("--rate-limit %v: want rows/s >= 0 (0: none)", f.rateLimit)
	}
	return p, nil
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
	// done (LoadS and BackfillS are bench.Summary's Load and Backfill,
	// for a reader of the worker's lines: the supervisor times the run
	// itself)
	MVMatches bool    `json:"mv_matches,omitempty"`
	MVError   string  `json:"mv_error,omitempty"`
	Epoch     uint64  `json:"epoch,omitempty"`
	LoadS     float64 `json:"load_s,omitempty"`
	BackfillS float64 `json:"backfill_s,omitempty"`
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
	emit := func(e event) {
		if err := enc.Encode(e); err != nil {
			os.Exit(exitWorkerLost) // the supervisor is gone
		}
	}
	var s *bench.Session
	cfg := bench.Config{
		Dir: f.dir, Workload: p, Upstreams: f.upstreamParams(p), Mode: f.jobMode(), SnapshotOrder: f.snapshotOrder, Actors: f.actors, ChunkSize: f.chunkSize, BarrierRows: f.barrierRows,
		CheckpointEvery: f.checkpointEvery, RateLimit: f.rateLimit, RateChanges: f.rateChanges,
		Store: &lsm.Options{Logger: cliLogger{w: stderr}, StatsBucketBudget: f.bucketBudget, ObjectStore: objectStoreOptions(f.objectStore)},
		OnOpen: func(opened *bench.Session) error {
			s = opened
			if f.metricsAddr != "" {
				// The supervisor holds the listener (its address stays
				// across restarts) and hands it to each worker as file
				// descriptor 3.
				metrics, err := serveMetrics(os.NewFile(3, "metrics listener"), s.Store, s.Job)
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
			e := event{T: "ckpt", Rec: toJSON(r)}
			e.StateBytes, e.StatsOnlyBytes = s.Job.StateBytes()
			emit(e)
		},
	}
	sum, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	emit(event{T: "done", Epoch: sum.Epoch, LoadS: sum.Load.Seconds(), BackfillS: sum.Backfill.Seconds(),
		MVMatches: sum.MVMatches, MVError: sum.MVError})
	return nil
}

// ---- supervisor --------------------------------------------------------

// report is the JSON file of a run.
type report struct {
	Parameters     map[string]any               `json:"parameters"`
	Barriers       []barrierJSON                `json:"barriers"`
	Recoveries     []barrierJSON                `json:"recoveries"`
	MVMatches      bool                         `json:"mv_matches_upstream"`
	MVError        string                       `json:"mv_error,omitempty"`
	Crashes        int                          `json:"crashes"`
	KilledBy       []string                     `json:"killed_by"`
	CommittedEpoch uint64                       `json:"committed_epoch"`
	Error          map[string]*bench.ErrorStats `json:"error"`
	Cost           map[string]costJSON          `json:"cost"`
	Timings        timingsJSON                  `json:"timings"`
	// ETA is the accuracy of the ETA after 10% progress (truth), against
	// the actual remaining time of each checkpoint.
	ETA bench.ETAStats `json:"eta_after_10pct"`
	// MetricsAddr is where --metrics-addr served the metrics.
	MetricsAddr string `json:"metrics_addr,omitempty"`
}

type barrierJSON struct {
	Barrier  uint64  `json:"barrier"`
	Epoch    uint64  `json:"epoch"`
	Truth    float64 `json:"truth"`
	RowCount float64 `json:"rowcount"`
	Stats    float64 `json:"stats"`
	// StatsBounds bound the truth (the stats approach's bounds).
	StatsBounds       *backfill.Bounds `json:"stats_bounds,omitempty"`
	DisplayedRowCount string           `json:"displayed_rowcount"`
	DisplayedStats    string           `json:"displayed_stats"`
	Finished          bool             `json:"finished"`
	VnodeErrMeanPP    float64          `json:"vnode_err_mean_pp"`
	VnodeErrMaxPP     float64          `json:"vnode_err_max_pp"`
	SnapshotRows      uint64           `json:"snapshot_rows"`
	RateLimit         float64          `json:"rate_limit"`
	TimeNS            int64            `json:"time_unix_ns"`
	ETA               etaJSON          `json:"eta"`
	// ActualRemainingS is the time from this checkpoint to the job's
	// end, known once it finished.
	ActualRemainingS float64 `json:"actual_remaining_s"`
	// Phase is a snapshot backfill's phase, and Upstreams every table's
	// figures and truth.
	Phase     string                      `json:"phase,omitempty"`
	Upstreams []backfill.UpstreamProgress `json:"upstreams,omitempty"`
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
	TotalS     float64   `json:"total_s"`
	LoadS      float64   `json:"load_s"`
	BackfillS  float64   `json:"backfill_s"`
	RunsS      []float64 `json:"runs_s"`
	RowsPerS   float64   `json:"snapshot_rows_per_s"`
	RecoveryMS []float64 `json:"recovery_ms"`
}

func barrierOf(r *recordJSON) barrierJSON {
	rc, st := r.figure("rowcount"), r.figure("stats")
	return barrierJSON{Barrier: r.Barrier, Epoch: r.Epoch, Truth: r.Truth, RowCount: rc.Raw, Stats: st.Raw,
		StatsBounds: st.Bounds, DisplayedRowCount: rc.Shown, DisplayedStats: st.Shown, Finished: r.Finished,
		VnodeErrMeanPP: r.VnodeErrMean, VnodeErrMaxPP: r.VnodeErrMax,
		SnapshotRows: r.Rows, RateLimit: r.RateLimit, TimeNS: r.TimeNS, ETA: r.ETA, Phase: r.Phase, Upstreams: r.Upstreams}
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
}

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
	sv.ui = newProgressUI(f.bars, stdout)
	defer sv.ui.stop()
	sv.rep = &report{Parameters: parameters(f, p), Error: map[string]*bench.ErrorStats{}}
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
// the next crash point; it reports whether it killed it.
func (sv *supervisor) follow(out io.Reader, worker *os.Process) (killed bool, err error) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return false, errors.Wrapf(err, "worker output %q", sc.Text())
		}
		if sv.handle(e) {
			// The worker goes on after reporting: the kill lands in the
			// next barrier's work.
			return true, worker.Signal(syscall.SIGKILL)
		}
	}
	return false, nil
}

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
		rep.Recoveries = append(rep.Recoveries, barrierOf(e.Rec))
		rep.Timings.RecoveryMS = append(rep.Timings.RecoveryMS, float64(time.Since(sv.runStart).Milliseconds()))
		sv.ui.update(e.Rec, true)
	case "ckpt":
		sv.records = append(sv.records, e.Rec)
		sv.runState, sv.runStatsOnly = e.StateBytes, e.StatsOnlyBytes
		rep.Barriers = append(rep.Barriers, barrierOf(e.Rec))
		sv.ui.update(e.Rec, false)
		if len(sv.crashAt) > 0 && int(e.Rec.Barrier) >= sv.crashAt[0] && !e.Rec.Finished {
			sv.crashAt = sv.crashAt[1:]
			return true
		}
	case "done":
		sv.done = &e
	}
	return false
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
	if rep.Timings.BackfillS > 0 {
		rep.Timings.RowsPerS = float64(rows) / rep.Timings.BackfillS
	}
	rep.Error, rep.Cost = summarize(sv.records, sv.stateBytes, sv.statsOnlyBytes)
	rep.ETA = etaAccuracy(rep.Barriers)
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
// finished barrier) and compares it with the ETA after 10% progress
// (bench.ETAPointsOf). A barrier whose ETA the report cannot hold (none
// shown, or unbounded: -1) is no point.
func etaAccuracy(barriers []barrierJSON) bench.ETAStats {
	cs := make([]bench.ETACheckpoint, len(barriers))
	for i, b := range barriers {
		cs[i] = bench.ETACheckpoint{Time: time.Unix(0, b.TimeNS), Finished: b.Finished, Truth: b.Truth, Stats: b.Stats}
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
		return bench.ETAStats{}
	}
	for i := range barriers {
		barriers[i].ActualRemainingS = max(0, float64(end.Sub(cs[i].Time))/1e9)
	}
	return bench.SummarizeETA(pts, 0.1)
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
		"rate_limit": f.rateLimit, "rate_change_at": []backfill.RateChange(f.rateChanges),
		"object_store": objectStoreName(f.objectStore),
	}
}

func printSummary(w io.Writer, rep *report) {
	fmt.Fprintf(w, "\n%-9s %12s %12s %22s %22s\n", "approach", "mean error", "max error", "progress CPU/barrier", "state bytes/barrier")
	for _, a := range []string{"rowcount", "stats"} {
		e, c := rep.Error[a], rep.Cost[a]
		if e == nil {
			continue
		}
		fmt.Fprintf(w, "%-9s %9.3f pp %9.3f pp %19.1f µs %22.0f\n", a, e.MeanPP, e.MaxPP, c.ProgressNSPerBarrier/1e3, c.StateBytesPerBarrier)
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
	fmt.Fprintf(w, "time: %.1fs total, %.1fs load, %.1fs backfill with its crashes and recoveries, %.0f snapshot rows/s\n",
		rep.Timings.TotalS, rep.Timings.LoadS, rep.Timings.BackfillS, rep.Timings.RowsPerS)
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
	fmt.Fprintf(w, "ETA after 10%% progress: median error %.1f%%, p90 %.1f%%, actual time inside the interval at %.0f%% of %s\n",
		100*e.MedianErr, 100*e.P90Err, 100*e.Coverage, plural(e.N, "checkpoint"))
	fmt.Fprintf(w, "%8s %9s  %-44s %9s\n", "barrier", "truth", "ETA", "actual")
	next := 0.0
	for _, b := range rep.Barriers {
		if b.Finished || b.ETA.RemainingS < 0 || b.Truth < next {
			continue
		}
		next = b.Truth + 20
		fmt.Fprintf(w, "%8d %8.2f%%  %-44s %9s\n", b.Barrier, b.Truth, b.ETA.Shown,
			backfill.FormatETA(time.Duration(b.ActualRemainingS*1e9)))
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
