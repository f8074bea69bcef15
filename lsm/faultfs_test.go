package lsm

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/internal/faultfs"
)

// Fault injection with Pebble's errorfs. A faultInjector wraps the store's
// file system (vfs.Default over a t.TempDir: the files survive the wrapper,
// so the same directory reopens with a clean FS) and fails the operations
// that match the rules a test arms. It counts what it injected per kind of
// operation (faultfs.Kind names the kinds), for the test log.
//
// Pebble turns faults in its WAL and MANIFEST (and the marker files that
// point at the MANIFEST) into Logger.Fatalf, which ends the process: in
// process, rules never match those files; faults_crash_test.go injects them
// in a child process.

// fatalPaths are the files whose write faults Pebble turns into Fatalf.
var fatalPaths = regexp.MustCompile(`(^|/)(MANIFEST-\d+|marker\.[^/]*|\d+\.log)$`)

// fatal reports whether Pebble may end the process on a fault of this kind
// on this path (relative to the store directory): any fault in the WAL, the
// MANIFEST or its marker (Logger.Fatalf), and a failed sync of Pebble's
// directory, which the MANIFEST marker's Move turns into a panic (fsync
// errors are unrecoverable) and which ingestion shares.
func fatal(kind, rel string) bool {
	return fatalPaths.MatchString(rel) || kind == "sync" && rel == pebbleDir
}

// faultRule fails operations of some kinds on paths matching a pattern
// (relative to the store directory, '/'-separated): after skip matching
// operations, each with probability prob (1 when 0), times times (0: until
// disarmed).
type faultRule struct {
	kinds []string
	path  *regexp.Regexp
	skip  int
	times int
	prob  float64
	// trigger, if set, keeps the rule from matching until an operation of
	// triggerKinds on a path matching trigger was seen.
	triggerKinds []string
	trigger      *regexp.Regexp
	triggered    bool

	seen, injected int
}

func (r *faultRule) String() string {
	s := fmt.Sprintf("%s on %s", strings.Join(r.kinds, "|"), r.path)
	if r.skip > 0 {
		s += fmt.Sprintf(" after %d", r.skip)
	}
	if r.times > 0 {
		s += fmt.Sprintf(" x%d", r.times)
	}
	if r.prob > 0 {
		s += fmt.Sprintf(" p=%g", r.prob)
	}
	return s
}

type faultInjector struct {
	dir        string
	allowFatal bool

	mu     sync.Mutex
	rules  []*faultRule
	rng    *rand.Rand
	counts faultfs.Counts // injected faults per kind
	// onInject, if set, is told of each fault as it is injected (a child
	// process prints it before the fault may end it).
	onInject func(kind, rel string)
}

var _ errorfs.Injector = (*faultInjector)(nil)

func newFaultInjector(dir string, seed uint64) *faultInjector {
	return &faultInjector{dir: dir, rng: rand.New(rand.NewPCG(seed, 0xfa17))}
}

// fs returns the store's file system: vfs.Default with this injector.
func (f *faultInjector) fs() vfs.FS { return errorfs.Wrap(vfs.Default, f) }

// arm adds a rule: kinds (faultfs.Kind's names) separated by '|', a path
// pattern.
func (f *faultInjector) arm(kinds, path string, skip, times int, prob float64) *faultRule {
	r := &faultRule{kinds: strings.Split(kinds, "|"), path: regexp.MustCompile(path), skip: skip, times: times, prob: prob}
	for _, k := range r.kinds {
		if !faultfs.IsKind(k) {
			panic(fmt.Sprintf("unknown fault kind %q", k))
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, r)
	return r
}

// disarm removes every rule.
func (f *faultInjector) disarm() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// total returns the number of faults injected so far.
func (f *faultInjector) total() int { return f.counts.Total() }

func (f *faultInjector) String() string { return "lsmstats fault injector" }

// MaybeError implements errorfs.Injector.
func (f *faultInjector) MaybeError(op errorfs.Op) error {
	rel := op.Path
	if r, err := filepath.Rel(f.dir, op.Path); err == nil && !strings.HasPrefix(r, "..") {
		rel = filepath.ToSlash(r)
	}
	kind := faultfs.Kind(op.Kind)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.rules) == 0 || (!f.allowFatal && fatal(kind, rel)) {
		return nil
	}
	for _, r := range f.rules {
		if r.trigger != nil && !r.triggered {
			r.triggered = slices.Contains(r.triggerKinds, kind) && r.trigger.MatchString(rel)
			continue
		}
		if !slices.Contains(r.kinds, kind) || !r.path.MatchString(rel) {
			continue
		}
		if r.times > 0 && r.injected >= r.times {
			continue
		}
		if r.seen++; r.seen <= r.skip {
			continue
		}
		if r.prob > 0 && f.rng.Float64() >= r.prob {
			continue
		}
		r.injected++
		f.counts.Add(kind)
		if f.onInject != nil {
			f.onInject(kind, rel)
		}
		return errors.Wrapf(errorfs.ErrInjected, "%s %s", kind, rel)
	}
	return nil
}

// summary renders the counts per kind, sorted by kind, and their total.
func (f *faultInjector) summary() string { return f.counts.Summary() }

// formatCounts renders counts per kind as summary does.
func formatCounts(m map[string]int) string { return faultfs.Format(m) }

// logFaults prints the injected faults per kind at the end of a test.
func logFaults(t *testing.T, f *faultInjector) { f.counts.LogAtEnd(t) }

// isInjected reports whether err comes from an injected fault, directly or
// as the cause that made the store refuse writes.
func isInjected(err error) bool {
	return errors.Is(err, errorfs.ErrInjected)
}
