package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/lsm"
)

// WorkerEnv is the environment variable that makes the test binary a
// worker: it holds the worker's task as JSON (TestMain calls Worker).
const WorkerEnv = "LSMSTATS_SOAK_WORKER"

// task is what the parent asks of one worker run.
type task struct {
	Dir    string  `json:"dir"`
	Job    JobSpec `json:"job"`
	Actors int     `json:"actors"`
	// Event is sigkill, fault, cancel or reopen (see the package doc).
	Event string `json:"event"`
	// After is when the event starts: the fault's arming or the cancel,
	// after the store opened; for reopen, the checkpoints to run first.
	After time.Duration `json:"after"`
	// Limit ends every run that lasts this long (a cancel, then a clean
	// close), so that an event whose faults missed does not run a whole
	// job; 0: no limit.
	Limit time.Duration `json:"limit"`
	// Fault is the rule a fault event arms, and FaultProb the probability
	// of failing each matching operation.
	Fault     int     `json:"fault"`
	FaultProb float64 `json:"fault_prob"`
	Seed      uint64  `json:"seed"`
	// MemoryWatermark of the store: small, so that writers spill.
	MemoryWatermark int64 `json:"memory_watermark"`
	// GC, if set, is a finished job whose tables the worker garbage
	// collects and compacts first (Pebble SINGLEDELs and their elision).
	GC *JobSpec `json:"gc,omitempty"`
}

// report is one line of a worker's stdout.
type report struct {
	// T is: O (the store is open), S (a load step committed), I (the
	// figure recovered at open), C (a checkpoint committed), J (a fault
	// injected), G (a finished job's tables garbage collected and
	// compacted), X (cancelled, then closed cleanly), D (the job finished,
	// and closed), E (an error stopped the run), F (Pebble's Fatalf).
	T        string            `json:"t"`
	Step     uint64            `json:"step,omitempty"`
	Barrier  uint64            `json:"barrier,omitempty"`
	Finished bool              `json:"finished,omitempty"`
	Figures  []backfill.Figure `json:"figures,omitempty"`
	// Msg is the error (E, F) or the injected operation (J); Injected says
	// whether an error carries an injected fault.
	Msg      string `json:"msg,omitempty"`
	Injected bool   `json:"injected,omitempty"`
}

func record(t string, r backfill.Record) report {
	figs := make([]backfill.Figure, len(r.Figures))
	for i, f := range r.Figures {
		figs[i] = backfill.Figure{Approach: f.Approach, Raw: f.Raw, Pct: f.Pct, Shown: f.Shown}
	}
	return report{T: t, Step: r.Step, Barrier: r.Barrier, Finished: r.Finished, Figures: figs}
}

// faultRules are the operations a fault event fails, by kind and by path
// relative to the store directory. Faults in the WAL and the MANIFEST end
// in Pebble's Fatalf, and a read error while a compaction elides a
// SINGLEDEL in a panic: the worker is a process of its own.
var faultRules = []struct{ kinds, path string }{
	{"create|write|sync", `^db/\d+\.sst$`},
	{"open|read|stat", `^db/\d+\.sst$`},
	{"create|write|sync|open|read|link|remove", `^staging/`},
	{"write|sync", `^db/\d+\.log$`},
	{"write|sync", `^db/MANIFEST-\d+$`},
	{"create|write|sync|rename", `^db/(OPTIONS-|temporary\.)`},
	{"write|sync|create", `^CHECKPOINT$`},
	{"create|write|sync|open|read|remove|link|stat|list|rename", `.`},
}

// injector fails the operations of one rule once armed, each with a
// probability, and reports each on stdout.
type injector struct {
	dir   string
	kinds []string
	path  *regexp.Regexp
	prob  float64
	armed atomic.Bool
	mu    sync.Mutex
	r     *rand.Rand
	say   func(report)
}

func (f *injector) String() string { return "soak injector" }

func (f *injector) MaybeError(op errorfs.Op) error {
	if !f.armed.Load() {
		return nil
	}
	rel, err := filepath.Rel(f.dir, op.Path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return nil
	}
	kind := faultfs.Kind(op.Kind)
	if !f.path.MatchString(filepath.ToSlash(rel)) || !slices.Contains(f.kinds, kind) {
		return nil
	}
	f.mu.Lock()
	hit := f.r.Float64() < f.prob
	f.mu.Unlock()
	if !hit {
		return nil
	}
	f.say(report{T: "J", Msg: kind + " " + rel})
	return errorfs.ErrInjected
}

// workerLogger drops Pebble's lines, and reports Fatalf on stdout before it
// exits with status 4 (a crash, as Pebble means it).
type workerLogger struct{ say func(report) }

func (workerLogger) Infof(string, ...any)  {}
func (workerLogger) Errorf(string, ...any) {}
func (l workerLogger) Fatalf(format string, args ...any) {
	l.say(report{T: "F", Msg: fmt.Sprintf(format, args...)})
	os.Exit(4)
}

// Worker runs one worker task (the JSON of WorkerEnv) and returns its exit
// status: 0 after D or X, 3 after E.
func Worker(taskJSON string) int {
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	say := func(r report) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(r)
	}
	var tk task
	if err := json.Unmarshal([]byte(taskJSON), &tk); err != nil {
		say(report{T: "E", Msg: err.Error()})
		return 3
	}
	fs := vfs.Default
	var inj *injector
	if tk.Event == "fault" {
		rule := faultRules[tk.Fault%len(faultRules)]
		inj = &injector{dir: tk.Dir, kinds: strings.Split(rule.kinds, "|"), path: regexp.MustCompile(rule.path),
			prob: tk.FaultProb, r: rand.New(rand.NewPCG(tk.Seed, 3)), say: say}
		fs = errorfs.Wrap(vfs.Default, inj)
		time.AfterFunc(tk.After, func() { inj.armed.Store(true) })
	}
	fail := func(err error) int {
		say(report{T: "E", Msg: err.Error(), Injected: errors.Is(err, errorfs.ErrInjected)})
		return 3
	}
	s, err := lsm.Open(tk.Dir, &lsm.Options{FS: fs, Logger: workerLogger{say: say}, MemoryWatermark: tk.MemoryWatermark,
		TargetFileSize: 256 << 10, L0StallLimit: 2 * time.Second})
	if err != nil {
		return fail(err)
	}
	say(report{T: "O"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if tk.GC != nil {
		for _, table := range []uint32{tk.GC.upstream(), tk.GC.mv()} {
			if _, err := s.GC(ctx, lsm.GCRequest{Table: table}); err != nil {
				_ = s.Close()
				return fail(err)
			}
			if err := s.CompactRange(ctx, table, 0, 0); err != nil {
				_ = s.Close()
				return fail(err)
			}
		}
		say(report{T: "G"})
	}
	checkpoints := 0
	h := Hooks{
		OnInitial: func(r backfill.Record) { say(record("I", r)) },
		OnStep:    func(step uint64) { say(report{T: "S", Step: step}) },
		OnCheckpoint: func(r backfill.Record) {
			say(record("C", r))
			checkpoints++
			if tk.Event == "reopen" && checkpoints >= int(tk.After) {
				cancel()
			}
		},
	}
	if tk.Event == "cancel" {
		time.AfterFunc(tk.After, cancel)
	}
	if tk.Limit > 0 {
		time.AfterFunc(tk.Limit, cancel)
	}
	finished, err := RunJob(ctx, s, tk.Job, tk.Actors, h)
	if err != nil && !(errors.Is(err, context.Canceled) && ctx.Err() != nil) {
		_ = s.Close()
		return fail(err)
	}
	if err := s.Close(); err != nil {
		return fail(err)
	}
	if err != nil || !finished {
		say(report{T: "X"})
		return 0
	}
	say(report{T: "D"})
	return 0
}
