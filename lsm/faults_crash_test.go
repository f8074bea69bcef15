package lsm

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// Faults that Pebble turns into a crash: a failed write or sync of the WAL
// or the MANIFEST ends in Logger.Fatalf, a failed sync of Pebble's
// directory while the MANIFEST marker moves and a failed WAL rotation in a
// panic, and so does a failed read while a compaction elides a SINGLEDEL.
// They run in a child process (this test binary, re-executed) whose logger
// exits on Fatalf; the parent treats every way the child ends as a crash,
// reopens the store with a clean file system and checks it like TestCrash
// does: the last committed step complete, nothing later visible, Verify
// clean.
//
// The store writes nothing to the WAL itself (every checkpoint is an
// ingestion): the child logs a synced WAL record through DB().LogData after
// each commit, as a tool sharing the DB would, so that WAL faults have
// writes to hit.

var faultCrashRuns = flag.Int("fault-crash-runs", 0, "child runs of TestFaultsCrash (0: two per rule)")

const (
	faultChildEnv = "LSMSTATS_LSM_FAULT_CHILD"
	faultRuleEnv  = "LSMSTATS_LSM_FAULT_RULE"
	// faultChildSteps is the number of commits a child makes before it
	// gives up waiting for its fault.
	faultChildSteps = 12
	// faultExitFatal is the child's exit status after Logger.Fatalf; a Go
	// panic exits with 2, a returned error with 3.
	faultExitFatal = 7
)

// fatalRules are the faults of TestFaultsCrash, with the range of matching
// operations to let through first (so that the fault lands at a random
// point of the child's run).
var fatalRules = []struct {
	name, kinds, path string
	maxSkip           int
	// afterOpen arms the rule once the store is open; trigger ("kinds
	// path") holds it back until a matching operation happened.
	afterOpen bool
	trigger   string
}{
	{name: "manifest-write", kinds: "write", path: `^db/MANIFEST-\d+$`, maxSkip: 30},
	{name: "manifest-sync", kinds: "sync", path: `^db/MANIFEST-\d+$`, maxSkip: 30},
	{name: "wal-write", kinds: "write", path: `^db/\d+\.log$`, maxSkip: 8},
	{name: "wal-sync", kinds: "sync", path: `^db/\d+\.log$`, maxSkip: 8},
	// Pebble's directory: synced by ingestions (an error) and by the
	// MANIFEST marker's moves (a panic: fsync errors are unrecoverable).
	{name: "dir-sync", kinds: "sync", path: `^db$`, maxSkip: 20, afterOpen: true},
	{name: "marker-dir-sync", kinds: "sync", path: `^db$`, trigger: `create ^db/marker\.manifest\.`, afterOpen: true},
	{name: "marker", kinds: "create|write|sync", path: `^db/marker\.manifest\.`, maxSkip: 1, afterOpen: true},
	{name: "options", kinds: "create|write|sync|rename", path: `^db/(OPTIONS-|temporary\.)`, maxSkip: 3},
	{name: "sst-read", kinds: "read", path: `^db/\d+\.sst$`, maxSkip: 150, afterOpen: true},
	{name: "list", kinds: "list", path: `.`, maxSkip: 1},
}

// faultLogger is the child's logger: QuietLogger's, but Fatalf reports
// on stdout and exits with faultExitFatal.
type faultLogger struct{}

func (faultLogger) Infof(string, ...any) {}

func (faultLogger) Errorf(format string, args ...any) { QuietLogger(nil).Errorf(format, args...) }

func (faultLogger) Fatalf(format string, args ...any) {
	fmt.Printf("F %s\n", strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", " "))
	os.Exit(faultExitFatal)
}

// faultChild runs the crash workload on a store whose file system fails the
// operation its rule names, reporting on stdout: "I kind path" when the
// fault is injected, "C step" after each commit, "E injected|other: err"
// when an operation returns an error (then it exits with 3), "D" when it
// made all its steps.
func faultChild(dir string, seed uint64, rule string) {
	say := func(format string, args ...any) {
		fmt.Printf(format+"\n", args...)
	}
	fail := func(err error) {
		kind := "other"
		if isInjected(err) {
			kind = "injected"
		}
		say("E %s: %s", kind, strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(3)
	}
	f := newFaultInjector(dir, seed)
	f.allowFatal = true
	f.onInject = func(kind, rel string) { say("I %s %s", kind, rel) }
	// rule: skip afterOpen kinds path [triggerKinds triggerPath]
	parts := strings.Fields(rule)
	skip, _ := strconv.Atoi(parts[0])
	arm := func() {
		r := f.arm(parts[2], parts[3], skip, 1, 0)
		if len(parts) == 6 {
			r.triggerKinds, r.trigger = strings.Split(parts[4], "|"), regexp.MustCompile(parts[5])
		}
	}
	if parts[1] == "false" {
		arm()
	}
	// A small MANIFEST rotates often (about three times a run): the marker
	// that names the current one moves, and Pebble syncs its directory. No
	// commit back-pressure: after a failed compaction Pebble leaves its
	// inputs alone for 30 s, and L0 would reach the stop threshold.
	s, err := Open(dir, &Options{FS: f.fs(), MemoryWatermark: 48 << 10, Logger: faultLogger{}, L0StopSublevels: -1,
		Pebble: func(o *pebble.Options) { o.MaxManifestFileSize = 2 << 10 }})
	if err != nil {
		fail(err)
	}
	if parts[1] == "true" {
		arm()
	}
	g := newCrashGen(0)
	for _, def := range []TableDef{g.def, {ID: progressTable, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}} {
		if err := s.CreateTable(def); err != nil {
			fail(err)
		}
	}
	k, err := committedStep(s)
	if err != nil {
		fail(err)
	}
	g = newCrashGenAt(seed, k)
	lo, hi := roaring.New(), roaring.New()
	lo.AddRange(0, 8)
	hi.AddRange(8, 16)
	var ws [3]*Writer
	for i, spec := range []struct {
		table uint32
		vn    *roaring.Bitmap
	}{{crashTable, lo}, {crashTable, hi}, {progressTable, nil}} {
		if ws[i], err = s.NewWriter(spec.table, spec.vn, nil); err != nil {
			fail(err)
		}
	}
	half := func(vn uint16) *Writer {
		if vn >= 8 {
			return ws[1]
		}
		return ws[0]
	}
	epoch := s.EpochFloor()
	ctx := context.Background()
	for step := k + 1; step <= k+faultChildSteps; step++ {
		epoch++
		if err := g.write(step, epoch, half, ws[2]); err != nil {
			fail(err)
		}
		for _, w := range ws {
			if err := w.Seal(epoch); err != nil {
				fail(err)
			}
		}
		if err := s.Commit(epoch); err != nil {
			fail(err)
		}
		say("C %d", step)
		if err := s.db.LogData([]byte("lsmstats fault test"), pebble.Sync); err != nil {
			fail(err)
		}
		if step%3 == 0 {
			// GC's SINGLEDELs, and the compaction that drops them.
			if _, err := s.GC(ctx, GCRequest{Table: crashTable}); err != nil {
				fail(err)
			}
			if err := s.CompactRange(ctx, crashTable, 0, 0); err != nil {
				fail(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		fail(err)
	}
	say("D")
}

// TestFaultsCrash runs children with one fatal fault each (two runs per
// rule by default, on one store directory so that the history grows) and
// checks the store after each. Every rule must inject at least once.
func TestFaultsCrash(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 11))
	dir := t.TempDir()
	runs := *faultCrashRuns
	if runs == 0 {
		runs = 2 * len(fatalRules)
	}
	perRule := map[string]int{}  // faults injected per rule
	perKind := map[string]int{}  // faults injected per kind
	outcomes := map[string]int{} // how the children ended
	var lastStep uint64
	for run := 0; run < runs; run++ {
		rule := fatalRules[run%len(fatalRules)]
		skip := r.IntN(rule.maxSkip + 1)
		spec := fmt.Sprintf("%d %t %s %s %s", skip, rule.afterOpen, rule.kinds, rule.path, rule.trigger)
		var stderr strings.Builder
		c := testutil.StartChild(t, &stderr, faultChildEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed, 10),
			faultRuleEnv+"="+spec)
		var printed uint64
		var lines []string
		for l := range c.Lines() {
			lines = append(lines, l)
			switch {
			case strings.HasPrefix(l, "C "):
				printed, _ = strconv.ParseUint(l[2:], 10, 64)
			case strings.HasPrefix(l, "I "):
				perRule[rule.name]++
				perKind[strings.Fields(l)[1]]++
			}
		}
		end := c.Wait()
		require.NoError(t, end.WaitErr())
		code := end.Code
		last := ""
		if len(lines) > 0 {
			last = lines[len(lines)-1]
		}
		var outcome string
		switch {
		case code == 0 && last == "D":
			outcome = "survived"
		case code == faultExitFatal:
			outcome = "fatal"
		case code == 2 && strings.Contains(stderr.String(), "panic"):
			outcome = "panic"
		case code == 3 && strings.HasPrefix(last, "E injected: "):
			outcome = "error"
		default:
			t.Fatalf("run %d (%s, skip %d): child exited with %d; last line %q; stderr:\n%s", run, rule.name, skip, code, last, tail(stderr.String(), 2000))
		}
		outcomes[outcome]++
		if outcome != "survived" {
			require.Positive(t, perRule[rule.name], "run %d (%s): the child ended by %s without an injected fault", run, rule.name, outcome)
		}

		// Reopen with a clean file system and check, as after a SIGKILL.
		printed = max(printed, lastStep) // the child may not have committed
		s, k := reopenAfterCrash(t, dir, seed, printed, lastStep, fmt.Sprintf("run %d (%s, %s)", run, rule.name, outcome))
		lastStep = k
		require.NoError(t, s.Close())
		if os.Getenv("CRASH_DEBUG") != "" {
			t.Logf("run %d: %s skip %d: %s, committed step %d; last %q", run, rule.name, skip, outcome, k, last)
		}
	}
	t.Logf("faults injected per kind: %s; per rule: %v; children ended by: %v; last committed step %d",
		formatCounts(perKind), perRule, outcomes, lastStep)
	for _, rule := range fatalRules {
		require.Positive(t, perRule[rule.name], "rule %s never injected a fault", rule.name)
	}
	require.Positive(t, outcomes["fatal"], "no fault ended in Fatalf")
	// Some faults make Pebble panic (a read error while a compaction elides
	// a SINGLEDEL; a failed directory sync while moving a marker); whether
	// one lands depends on timing, so panics are counted, not required.
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
