package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/lsm"
)

// Config is one soak.
type Config struct {
	// Dir is the store directory, For how long to run (the event running
	// at the end finishes), Seed the seed of every random choice.
	Dir  string
	For  time.Duration
	Seed uint64
	// EventTimeout is how long a worker may go without reporting or ending
	// before it counts as a hang (then it is killed); 0 means 3 minutes.
	EventTimeout time.Duration
	// MaxFindings stops the soak early; 0 means 1000.
	MaxFindings int
	// Logf, if set, receives a line per event.
	Logf func(format string, args ...any)
}

// Report is what a soak did and found.
type Report struct {
	Events map[string]int
	// Findings are every finding, "kind: event N (...): what"; FindingsByKind
	// counts them per kind.
	Findings       []string
	FindingsByKind map[string]int
	// Jobs is the number of jobs that finished; Checks the number of
	// checks run (one per event).
	Jobs, Checks int
	Elapsed      time.Duration
}

// Summary renders the events per kind and the findings.
func (r Report) Summary() string {
	var b strings.Builder
	kinds := make([]string, 0, len(r.Events))
	total := 0
	for k, n := range r.Events {
		kinds = append(kinds, k)
		total += n
	}
	sort.Strings(kinds)
	fmt.Fprintf(&b, "%d events in %s, %d checks, %d jobs finished\nevents per kind:", total,
		r.Elapsed.Round(time.Second), r.Checks, r.Jobs)
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, r.Events[k])
	}
	fmt.Fprintf(&b, "\nfindings: %d", len(r.Findings))
	kinds = kinds[:0]
	for k := range r.FindingsByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, r.FindingsByKind[k])
	}
	b.WriteString("\n")
	// The first three of each kind.
	shown := map[string]int{}
	for _, f := range r.Findings {
		k, _, _ := strings.Cut(f, ":")
		if shown[k]++; shown[k] <= 3 {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
	}
	return b.String()
}

// eventKinds are the events, in the order the first runs go through them.
var eventKinds = []string{"sigkill", "fault", "cancel", "reopen"}

// soak is the parent's state.
type soak struct {
	t   testing.TB
	cfg Config
	r   *rand.Rand
	rep Report

	job JobSpec
	// reported is the last step the current job's workers reported
	// committed; hwm the highest figure each approach displayed.
	reported uint64
	hwm      map[string]float64
	// done are the finished jobs with digests of their upstream and MV.
	done []doneJob
}

type doneJob struct {
	spec         JobSpec
	upstream, mv uint64
}

// Run runs a soak; the workers are t's test binary run again (TestMain
// must call Worker when WorkerEnv is set).
func Run(t testing.TB, cfg Config) Report {
	if cfg.EventTimeout == 0 {
		cfg.EventTimeout = 3 * time.Minute
	}
	if cfg.MaxFindings == 0 {
		cfg.MaxFindings = 1000
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	sk := &soak{t: t, cfg: cfg, r: rand.New(rand.NewPCG(cfg.Seed, 17)), rep: Report{Events: map[string]int{}, FindingsByKind: map[string]int{}}}
	sk.startJob(0)
	start := time.Now()
	// A soak runs every kind of event at least once however short For is
	// (under the race detector one event can take longer than make test's
	// 20 s), then goes on until For has passed.
	for n := 0; (n < len(eventKinds) || time.Since(start) < cfg.For) && len(sk.rep.Findings) < cfg.MaxFindings; n++ {
		event := eventKinds[n%len(eventKinds)]
		if n >= len(eventKinds) {
			event = eventKinds[sk.r.IntN(len(eventKinds))]
		}
		sk.event(n, event)
	}
	sk.rep.Elapsed = time.Since(start)
	return sk.rep
}

func (sk *soak) startJob(i int) {
	sk.job = jobSpec(sk.cfg.Seed, i)
	sk.reported = 0
	sk.hwm = map[string]float64{}
	sk.cfg.Logf("starting %s", sk.job)
}

// finding records a finding of a kind (hang, display, upstream, mv, stats,
// ...).
func (sk *soak) finding(n int, kind, format string, args ...any) {
	f := fmt.Sprintf("%s: event %d (seed %d, %s): %s", kind, n, sk.cfg.Seed, sk.job, fmt.Sprintf(format, args...))
	sk.rep.Findings = append(sk.rep.Findings, f)
	sk.rep.FindingsByKind[kind]++
	sk.cfg.Logf("FINDING %s", f)
}

// event runs one worker with event kind, then checks the store.
func (sk *soak) event(n int, kind string) {
	r := sk.r
	tk := task{Dir: sk.cfg.Dir, Job: sk.job, Actors: 1 + r.IntN(min(4, sk.job.Workload.VnodeCount)), Event: kind,
		Seed: r.Uint64(), MemoryWatermark: int64(32<<10) << r.IntN(4)}
	if len(sk.done) > 0 && r.IntN(4) == 0 {
		tk.GC = &sk.done[r.IntN(len(sk.done))].spec
	}
	if kind != "sigkill" {
		tk.Limit = time.Duration(2000+r.IntN(4000)) * time.Millisecond
	}
	switch kind {
	case "fault":
		tk.Fault = r.IntN(len(faultRules))
		tk.FaultProb = []float64{0.02, 0.1, 0.5, 1}[r.IntN(4)]
		tk.After = time.Duration(r.IntN(1500)) * time.Millisecond
	case "cancel":
		tk.After = time.Duration(r.IntN(1500)) * time.Millisecond
	case "reopen":
		tk.After = time.Duration(1 + r.IntN(4)) // checkpoints
	}
	js, err := json.Marshal(tk)
	if err != nil {
		sk.t.Fatal(err)
	}
	var stderr bytes.Buffer
	c := testutil.StartChild(sk.t, &stderr, WorkerEnv+"="+string(js))
	var lines []report
	handle := func(l string) {
		var rp report
		if err := json.Unmarshal([]byte(l), &rp); err != nil {
			sk.finding(n, "worker-output", "worker printed %q", l)
			return
		}
		lines = append(lines, rp)
	}
	hung := false
	if kind == "sigkill" {
		killAt := time.Now().Add(time.Duration(50+r.IntN(2500)) * time.Millisecond)
		c.ReadUntil(0, func(l string) bool { handle(l); return time.Now().After(killAt) })
		// The worker may have ended on its own (the job finished).
		c.KillAfter(sk.t, time.Until(killAt), handle)
	} else {
		for {
			reason := c.ReadUntil(sk.cfg.EventTimeout, func(l string) bool { handle(l); return false })
			if reason == testutil.Ended {
				break
			}
			if !hung {
				// Where it hangs: its goroutines' stacks on stderr.
				hung = true
				c.Quit(sk.t)
				if c.ReadUntil(10*time.Second, func(l string) bool { handle(l); return false }) == testutil.Ended {
					break
				}
			}
			c.Kill(sk.t)
		}
	}
	end := c.Wait()
	outcome := sk.outcome(n, kind, lines, end, stderr.String(), hung)
	sk.rep.Events[outcome]++
	for _, l := range lines {
		if l.T == "G" {
			sk.rep.Events["gc"]++
		}
	}
	sk.cfg.Logf("event %d: %s (%d actors, %d reports, gc %t) -> %s", n, kind, tk.Actors, len(lines), tk.GC != nil, outcome)
	sk.record(n, lines)
	sk.check(n)
}

// outcome names how a worker run ended for its event, and reports the
// ends that no event explains.
func (sk *soak) outcome(n int, kind string, lines []report, end testutil.Exit, stderr string, hung bool) string {
	last := report{}
	if len(lines) > 0 {
		last = lines[len(lines)-1]
	}
	injected := false
	for _, l := range lines {
		injected = injected || l.T == "J"
	}
	if hung {
		sk.finding(n, "hang", "%s: the worker did not end within %s (%d reports); last report %+v; its goroutines, where they name this module:\n%s",
			kind, sk.cfg.EventTimeout, len(lines), last, ourStacks(stderr))
		return kind + ":hang"
	}
	if err := end.WaitErr(); err != nil {
		sk.finding(n, "worker-end", "%s: waiting for the worker: %v", kind, err)
		return kind + ":lost"
	}
	switch {
	case kind == "sigkill" && end.Killed:
		return "sigkill"
	case end.Code == 0 && last.T == "D":
		return kind + ":job-finished"
	case end.Code == 0 && last.T == "X" && (kind == "cancel" || kind == "reopen"):
		return kind
	case end.Code == 0 && last.T == "X" && kind == "fault":
		// The run reached its limit: the faults hit nothing that failed.
		return "fault:survived"
	case kind == "fault" && end.Code == 3 && last.T == "E" && last.Injected:
		return "fault:error"
	case kind == "fault" && end.Code == 4 && last.T == "F" && injected:
		return "fault:fatal"
	case kind == "fault" && end.Code == 2 && strings.Contains(stderr, "panic") && strings.Contains(stderr, "injected error"):
		return "fault:panic"
	case kind == "fault" && end.Code == 2 && injected && pebblePanicked(stderr):
		return "fault:panic"
	}
	sk.finding(n, "worker-end", "%s: the worker ended with status %d (killed %t) after %+v; stderr:\n%s", kind, end.Code, end.Killed, last, tail(stderr))
	return kind + ":unexpected"
}

// record checks the display rules on what the worker reported, and notes
// the last committed step it reported.
func (sk *soak) record(n int, lines []report) {
	for _, l := range lines {
		switch l.T {
		case "S", "C":
			if l.Step < sk.reported {
				sk.finding(n, "committed-step", "reported step %d after step %d", l.Step, sk.reported)
			}
			sk.reported = max(sk.reported, l.Step)
		}
		if l.T == "I" || l.T == "C" {
			sk.display(n, "worker", l.Figures, l.Finished)
		}
	}
}

// display checks the display rules on one record's figures.
func (sk *soak) display(n int, who string, figs []backfill.Figure, finished bool) {
	for _, f := range figs {
		pct, err := shownPct(f.Shown)
		if err != nil {
			sk.finding(n, "display", "%s: %s figure %q: %v", who, f.Approach, f.Shown, err)
			continue
		}
		if pct < sk.hwm[f.Approach] {
			sk.finding(n, "display", "%s: the displayed %s figure went back from %.2f%% to %q", who, f.Approach, sk.hwm[f.Approach], f.Shown)
		}
		sk.hwm[f.Approach] = max(sk.hwm[f.Approach], pct)
		if !finished && pct >= 100 {
			sk.finding(n, "display", "%s: %s shows %q before the job finished", who, f.Approach, f.Shown)
		}
		if finished && !strings.HasPrefix(f.Shown, "100.00% (") {
			sk.finding(n, "display", "%s: %s shows %q though the job finished", who, f.Approach, f.Shown)
		}
	}
}

func shownPct(shown string) (float64, error) {
	pct, _, ok := strings.Cut(shown, "%")
	if !ok {
		return 0, errors.New("no percentage")
	}
	return strconv.ParseFloat(pct, 64)
}

// check opens the store and checks every invariant of the package doc.
func (sk *soak) check(n int) {
	sk.rep.Checks++
	s, err := lsm.Open(sk.cfg.Dir, &lsm.Options{Logger: lsm.QuietLogger(io.Discard)})
	if err != nil {
		sk.finding(n, "check-open", "check: open: %v", err)
		return
	}
	defer func() {
		if err := s.Close(); err != nil {
			sk.finding(n, "check-open", "check: close: %v", err)
		}
	}()
	g, err := workload.New(sk.job.Workload)
	if err != nil {
		sk.t.Fatal(err)
	}
	j, err := backfill.OpenJob(jobConfig(s, sk.job, 1, g, Hooks{}))
	if err != nil {
		sk.finding(n, "check-open", "check: open the job: %v", err)
		return
	}
	finished := false
	func() {
		defer func() {
			if err := j.Close(); err != nil {
				sk.finding(n, "check-open", "check: close the job: %v", err)
			}
		}()
		// OpenJob replayed the workload to the committed step.
		if g.Step() < sk.reported {
			sk.finding(n, "committed-step", "check: committed step %d, but the worker reported step %d committed", g.Step(), sk.reported)
		}
		sk.reported = g.Step()
		if err := sameRows(s, sk.job.upstream(), g); err != nil {
			sk.finding(n, "upstream", "check: upstream table: %v", err)
		}
		if rec := j.Initial(); rec != nil {
			sk.display(n, "recovery", rec.Figures, rec.Finished)
			if err := mvBehindCursors(s, sk.job, rec.Vnodes); err != nil {
				sk.finding(n, "mv", "check: MV: %v", err)
			}
			finished = rec.Finished
		}
	}()
	rep, err := s.Verify()
	switch {
	case err != nil:
		sk.finding(n, "stats", "check: verify: %v", err)
	case !rep.OK():
		sk.finding(n, "stats", "check: verify: differences %q, corrupt %q, unchecked %q", rep.Differences, rep.Corrupt, rep.Unchecked)
	}
	// Finished jobs keep their tables: the last three after every event,
	// all of them every 25.
	from := max(0, len(sk.done)-3)
	if n%25 == 0 {
		from = 0
	}
	for _, d := range sk.done[from:] {
		up, mv, err := digests(s, d.spec)
		if err != nil || up != d.upstream || mv != d.mv {
			sk.finding(n, "finished-job", "check: finished %s changed (err %v)", d.spec, err)
		}
	}
	if finished {
		up, mv, err := digests(s, sk.job)
		switch {
		case err != nil:
			sk.finding(n, "finished-job", "check: digests: %v", err)
		case up != mv:
			sk.finding(n, "finished-job", "check: the finished job's MV differs from its upstream table")
		}
		sk.done = append(sk.done, doneJob{spec: sk.job, upstream: up, mv: mv})
		sk.rep.Jobs++
		sk.cfg.Logf("%s finished at step %d", sk.job, g.Step())
		sk.startJob(sk.job.Index + 1)
	}
}

// sameRows compares a table with the workload's rows, vnode by vnode.
func sameRows(s *lsm.Store, table uint32, g *workload.Generator) error {
	for v := 0; v < g.Params().VnodeCount; v++ {
		var want [][2][]byte
		g.EachRow(uint16(v), func(pk, row []byte) { want = append(want, [2][]byte{slices.Clone(pk), slices.Clone(row)}) })
		slices.SortFunc(want, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
		it, err := s.NewIter(table, uint16(v), nil, nil)
		if err != nil {
			return err
		}
		i := 0
		for ok := it.First(); ok; ok = it.Next() {
			if i >= len(want) || !bytes.Equal(it.PK(), want[i][0]) || !bytes.Equal(it.Row(), want[i][1]) {
				_ = it.Close()
				return errors.Newf("vnode %d differs from the committed workload at row %d (pk %x)", v, i, it.PK())
			}
			i++
		}
		if err := it.Close(); err != nil {
			return err
		}
		if i != len(want) {
			return errors.Newf("vnode %d has %d rows, the committed workload %d", v, i, len(want))
		}
	}
	return nil
}

// mvBehindCursors checks that the MV holds exactly the upstream rows the
// backfill read: all of a finished vnode, those at or below the cursor of
// a vnode in progress, none of a vnode not started.
func mvBehindCursors(s *lsm.Store, spec JobSpec, states []backfill.VnodeState) error {
	snap, err := s.Snapshot()
	if err != nil {
		return err
	}
	defer snap.Close()
	for _, st := range states {
		behind := func(pk []byte) bool {
			return st.Finished || st.Cursor != nil && bytes.Compare(pk, st.Cursor) <= 0
		}
		rows := func(table uint32) ([][2][]byte, error) {
			var out [][2][]byte
			it, err := snap.NewIter(table, st.Vnode, nil, nil)
			if err != nil {
				return nil, err
			}
			for ok := it.First(); ok; ok = it.Next() {
				out = append(out, [2][]byte{slices.Clone(it.PK()), slices.Clone(it.Row())})
			}
			return out, it.Close()
		}
		up, err := rows(spec.upstream())
		if err != nil {
			return err
		}
		mv, err := rows(spec.mv())
		if err != nil {
			return err
		}
		up = slices.DeleteFunc(up, func(r [2][]byte) bool { return !behind(r[0]) })
		for _, r := range mv {
			if !behind(r[0]) {
				return errors.Newf("vnode %d (cursor %x, finished %t): the MV holds pk %x, past the cursor",
					st.Vnode, st.Cursor, st.Finished, r[0])
			}
		}
		if len(up) != len(mv) {
			return errors.Newf("vnode %d (cursor %x, finished %t): %d upstream rows behind the cursor, %d in the MV",
				st.Vnode, st.Cursor, st.Finished, len(up), len(mv))
		}
		for i := range up {
			if !bytes.Equal(up[i][0], mv[i][0]) || !bytes.Equal(up[i][1], mv[i][1]) {
				return errors.Newf("vnode %d: upstream row %x differs from MV row %x", st.Vnode, up[i][0], mv[i][0])
			}
		}
	}
	return nil
}

// digests hashes a job's upstream and MV tables at the committed epoch.
func digests(s *lsm.Store, spec JobSpec) (upstream, mv uint64, err error) {
	hash := func(table uint32) (uint64, error) {
		h := fnv.New64a()
		for v := 0; v < spec.Workload.VnodeCount; v++ {
			it, err := s.NewIter(table, uint16(v), nil, nil)
			if err != nil {
				return 0, err
			}
			if _, err := testutil.DigestRows(h, it); err != nil {
				return 0, err
			}
		}
		return h.Sum64(), nil
	}
	if upstream, err = hash(spec.upstream()); err != nil {
		return 0, 0, err
	}
	mv, err = hash(spec.mv())
	return upstream, mv, err
}

// ourStacks returns the goroutine stacks of a Go process's dump (SIGQUIT)
// that have a frame of this module, at most 20,000 bytes of them, or the
// tail of the text when it holds no such stack.
func ourStacks(dump string) string {
	var b strings.Builder
	for _, g := range strings.Split(dump, "\n\n") {
		if strings.HasPrefix(g, "goroutine ") && strings.Contains(g, "github.com/lsmstats/lsmstats/") && b.Len() < 20000 {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	if b.Len() == 0 {
		return tail(dump)
	}
	return b.String()
}

func tail(s string) string {
	if len(s) > 3000 {
		return "..." + s[len(s)-3000:]
	}
	return s
}

// pebblePanicked reports whether stderr holds a panic raised in Pebble: the
// first frame of ours or a library's after the runtime's panic( line is
// Pebble's. Pebble panics on some I/O errors (rotateWAL, when closing the
// full WAL fails); when a deferred unlock then fails as well, Go ends with
// "fatal error: sync: unlock of unlocked mutex" and prints the panic value
// as its type and address, without the text "injected error".
func pebblePanicked(stderr string) bool {
	_, after, ok := strings.Cut(stderr, "\npanic(")
	if !ok {
		return false
	}
	for _, line := range strings.Split(after, "\n")[1:] {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "github.com/") {
			return strings.HasPrefix(line, "github.com/cockroachdb/pebble/")
		}
	}
	return false
}
