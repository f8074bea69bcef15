package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestCorruption damages the files of a real store that a backfill left
// behind — a block of an SST of every kind, the MANIFEST (spread over its
// whole length; the last edits of the fixture add SSTs that no later edit
// removes, so that an older version of it opens in Pebble without an
// error) and the store's copy of it, Pebble's OPTIONS, the WAL, the
// checkpoint mark, a staged spill — by flipping, zeroing or cutting a
// random byte range, one injection per copy of the store, and then runs
// what a user would: a read-only open and reads of every table
// at several epochs, `lsmstats stats`, `lsmstats verify`, and a resume of
// the backfill to its end. Every outcome must be one of
//
//   - a correct result: the same rows, statistics and report as the
//     undamaged store (for example after damage Pebble tolerates, such as
//     a cut WAL tail), or for the resume a finished job whose MV equals its
//     upstream table and whose upstream holds every row the workload
//     committed;
//   - an error marked lsmstats.ErrCorruption (stats and verify: exit 7
//     with a message) that names what is corrupt: the file, or the
//     metadata row's key.
//
// Anything else fails the test: a hang (every operation runs under a
// watchdog), a panic, an exit, an unmarked error, or a result that differs
// from the undamaged store's while reported as fine. It prints the seed
// (-corruption-seed takes it back) and a table of outcomes per file kind
// and injection.

var (
	corruptionInjections = flag.Int("corruption-injections", 210, "injections of TestCorruption")
	corruptionSeed       = flag.Uint64("corruption-seed", 0, "seed of TestCorruption (0: testutil.DefaultSeed, or time based with -random-seeds)")
)

// opTimeout is the watchdog of each operation on a damaged store.
const opTimeout = 2 * time.Minute

// corruptionConfig is the backfill of the fixture: churn before and during
// it, spills (a 48 KiB memory watermark) and SSTs cut at 16 KiB; its SSTs in
// obj's bucket unless obj is nil.
func corruptionConfig(t testing.TB, dir string, obj *fixtureBucket) bench.Config {
	p, err := workload.Preset("mixed", 3000, 8, 5)
	require.NoError(t, err)
	p.DuringSteps = 8
	return bench.Config{
		Dir: dir, Workload: p, Actors: 2, ChunkSize: 64, BarrierRows: 192,
		Store: &lsm.Options{Logger: lsm.QuietLogger(io.Discard), MemoryWatermark: 48 << 10, TargetFileSize: 16 << 10,
			ObjectStore: obj.storeOptions()},
	}
}

// fixture is the undamaged store and what it answers.
type fixture struct {
	dir    string
	epochs []uint64
	// reads are the digests of every (table, vnode) at each epoch.
	reads map[uint64]map[string]uint64
	// stats and verify are the commands' outputs.
	stats, verify string
	// targets are the damageable things: files, and SST blocks by kind.
	targets []target
	// ssts are the SSTs of the version Pebble alone opens (a store on
	// local disk).
	ssts string
	// obj is the object store of a store that keeps its SSTs in a bucket
	// (nil: local disk).
	obj *fixtureBucket
}

// target is one file, or one block of an SST, that can be damaged.
type target struct {
	kind string // "sst:data", "manifest", ...
	rel  string // path under the store directory
	off  int64
	size int64
}

func buildFixture(t *testing.T, obj *fixtureBucket) *fixture {
	dir := filepath.Join(t.TempDir(), "fixture")
	cfg := corruptionConfig(t, dir, obj)
	// No compactions and one actor (actors write concurrently, and which
	// one's buffer spills varies) while it is built: the same seed damages
	// the same files. The resume compacts, with two actors (a rescale).
	cfg.Store.Pebble = func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
		// The final compaction cuts SSTs at 32 KiB: data, metadata and
		// every level in files of their own.
		for i := range o.TargetFileSizes {
			o.TargetFileSizes[i] = 32 << 10
		}
	}
	cfg.Actors = 1
	// Copy the staged spills aside once a spill wrote them: a crash would
	// have left them behind.
	spills := filepath.Join(t.TempDir(), "spills")
	copied := false
	cfg.Store.OnPhase = func(phase string) {
		if phase == "buffering" && !copied {
			copied = copyDir(t, filepath.Join(dir, "staging"), spills) > 0
		}
	}
	s, err := bench.Open(cfg)
	require.NoError(t, err)
	ctx := context.Background()
	for !s.Job.Started() {
		_, _, err := s.Job.Step(ctx)
		require.NoError(t, err)
	}
	// Most of the backfill's checkpoints (it has 13 with one actor):
	// the resume has the rest to do, with two actors, and stays quick.
	checkpoints := func(k int, flush bool) {
		for n := 0; n < k; {
			rec, ok, err := s.Job.Step(ctx)
			require.NoError(t, err)
			if ok {
				require.False(t, rec.Finished, "the backfill finished before the fixture was taken")
				n++
				if flush {
					require.NoError(t, lsminternal.DB(s.Store).Flush())
				}
			}
		}
	}
	checkpoints(2, false)
	// Compact it all, once (a manual compaction is deterministic): reads
	// and the resume then meet a few SSTs per level, not an L0 of every
	// checkpoint's.
	require.NoError(t, lsminternal.DB(s.Store).Compact(ctx, []byte{0}, []byte{0xff, 0xff, 0xff, 0xff, 0xff}, false))
	// Seven more, each flushed into L0, over WALs of their own: the
	// MANIFEST's edits after the compaction add SSTs that no later edit
	// removes, so a MANIFEST damaged among them would open an older version
	// whose files all exist — what Pebble alone opens without an error.
	checkpoints(7, true)
	// A synced WAL record, as a tool sharing the DB would write: the store
	// itself writes none (every checkpoint is an ingestion).
	require.NoError(t, lsminternal.DB(s.Store).LogData([]byte("lsmstats corruption test"), pebble.Sync))
	require.NoError(t, s.Close())
	require.True(t, copied, "no spill was staged")
	require.Positive(t, copyDir(t, spills, filepath.Join(dir, "staging")))

	f := &fixture{dir: dir, reads: map[uint64]map[string]uint64{}, obj: obj}
	ro, err := lsm.Open(dir, f.readOnly())
	require.NoError(t, err)
	committed := ro.CommittedEpoch()
	require.Greater(t, committed, uint64(4))
	f.epochs = []uint64{committed, committed - 1, committed / 2, 1}
	for _, e := range f.epochs {
		d, err := readAll(ro, e)
		require.NoError(t, err)
		f.reads[e] = d
	}
	require.NoError(t, ro.Close())
	var code int
	f.stats, _, code = f.run("stats", dir, "--json")
	require.Equal(t, exitOK, code)
	f.verify, _, code = f.run("verify", dir)
	require.Equal(t, exitOK, code, f.verify)
	if obj != nil {
		f.targets = obj.snapshot(t)
		return f
	}
	f.targets = listTargets(t, dir)
	f.ssts = pebbleSSTs(filepath.Join(dir, "db"))
	require.NotEmpty(t, f.ssts)
	return f
}

// readOnly is the options of a read-only open of a copy of the fixture.
func (f *fixture) readOnly() *lsm.Options {
	return &lsm.Options{ReadOnly: true, Logger: lsm.QuietLogger(io.Discard), ObjectStore: f.obj.storeOptions()}
}

// run runs command cmd of the CLI on the store in dir.
func (f *fixture) run(cmd, dir string, args ...string) (string, string, int) {
	args = append([]string{cmd, "--dir", dir}, args...)
	if f.obj != nil {
		args = append(args, "--object-store", f.obj.url)
	}
	return runQuiet(args...)
}

// targetsByKind returns the fixture's targets by kind, and the kinds in
// order; each kind of want must be among them.
func (f *fixture) targetsByKind(t *testing.T, want ...string) (map[string][]target, []string) {
	byKind := map[string][]target{}
	for _, tg := range f.targets {
		byKind[tg.kind] = append(byKind[tg.kind], tg)
	}
	kinds := slices.Sorted(maps.Keys(byKind))
	for _, w := range want {
		require.Contains(t, kinds, w, "the fixture has no %s to damage", w)
	}
	return byKind, kinds
}

// copyDir copies the files of src into dst (created) and returns how many.
func copyDir(t *testing.T, src, dst string) int {
	n := 0
	require.NoError(t, filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	}))
	return n
}

// listTargets lists what can be damaged in the store in dir.
func listTargets(t *testing.T, dir string) []target {
	var out []target
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st, err := d.Info()
		if err != nil {
			return err
		}
		name := d.Name()
		kind := ""
		switch {
		case strings.HasPrefix(rel, "staging/"):
			kind = "staging"
		case strings.HasSuffix(name, ".sst"):
			blocks, err := faultfs.SSTBlocks(p)
			if err != nil {
				return err
			}
			for _, b := range blocks {
				out = append(out, target{kind: "sst:" + b.Kind, rel: rel, off: b.Offset, size: b.Len})
			}
			return nil
		case strings.HasPrefix(name, "MANIFEST-") && strings.HasSuffix(name, ".copy"):
			kind = "manifest-copy"
		case strings.HasPrefix(name, "MANIFEST-"):
			kind = "manifest"
		case strings.HasPrefix(name, "OPTIONS-"):
			kind = "options"
		case strings.HasSuffix(name, ".log"):
			kind = "wal"
		case name == "CHECKPOINT":
			kind = "checkpoint"
		default:
			return nil // LOCK, markers: empty files
		}
		if st.Size() > 0 {
			out = append(out, target{kind: kind, rel: rel, size: st.Size()})
		}
		return nil
	}))
	return out
}

// readAll digests every row of every (table, vnode) at epoch.
func readAll(s *lsm.Store, epoch uint64) (map[string]uint64, error) {
	snap, err := s.Pin(epoch)
	if err != nil {
		return nil, err
	}
	defer snap.Close()
	out := map[string]uint64{}
	for _, def := range s.Tables() {
		for v := 0; v < def.VnodeCount; v++ {
			it, err := snap.NewIter(def.ID, uint16(v), nil, nil)
			if err != nil {
				return nil, err
			}
			h := fnv.New64a()
			if _, err := testutil.DigestRows(h, it); err != nil {
				return nil, err
			}
			out[fmt.Sprintf("t%d/v%d", def.ID, v)] = h.Sum64()
		}
	}
	return out, nil
}

func runQuiet(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// namesWhat reports whether an error message names what is corrupt: a
// file (an SST by number, the MANIFEST, OPTIONS, the checkpoint mark, a
// WAL, a staged file) or a metadata row's key.
var namesWhat = regexp.MustCompile(`(sst|file|table|backing file) \d{6}|\d{6}\.(sst|log)|MANIFEST|OPTIONS-\d+|CHECKPOINT|staging/|key [0-9a-f]{8,}`)

// outcomes counts outcomes per (target kind, injection) and operation.
// Safe for concurrent use.
type outcomes map[string]map[string]int

var outcomesMu sync.Mutex

func (o outcomes) add(row, op, outcome string) {
	outcomesMu.Lock()
	defer outcomesMu.Unlock()
	if o[row] == nil {
		o[row] = map[string]int{}
	}
	o[row][op+" "+outcome]++
	o[row]["n"]++
}

func TestCorruption(t *testing.T) {
	seed := testutil.Seed(t, "corruption-seed", *corruptionSeed)
	// A crash of the test binary (a panic in a Pebble goroutine, an exit)
	// loses the test log: the seed goes to stderr too.
	fmt.Fprintf(os.Stderr, "TestCorruption seed: %d\n", seed)
	r := rand.New(rand.NewPCG(seed, 16))
	start := time.Now()
	f := buildFixture(t, nil)
	t.Logf("fixture: %d damageable targets, built in %s", len(f.targets), time.Since(start).Round(time.Millisecond))

	byKind, kinds := f.targetsByKind(t, "sst:data", "sst:index", "sst:properties", "sst:metaindex", "sst:footer",
		"manifest", "manifest-copy", "options", "wal", "checkpoint", "staging")

	// The injections are drawn in order from the seed, then run by two
	// workers, each on its own copy of the store.
	type injection struct {
		i         int
		kind, rel string
		inj       faultfs.Injection
		off, n    int64
	}
	var plan []injection
	manifests := 0
	for i := 0; i < *corruptionInjections; i++ {
		kind := kinds[i%len(kinds)]
		inj := faultfs.Injections[(i/len(kinds))%len(faultfs.Injections)]
		tg := byKind[kind][r.IntN(len(byKind[kind]))]
		if kind == "manifest" {
			// Spread over the MANIFEST's whole length: each injection in
			// the next of 16 equal parts of it.
			part := int64(manifests % 16)
			manifests++
			tg.off, tg.size = tg.size*part/16, tg.size*(part+1)/16-tg.size*part/16
		}
		off, n, err := faultfs.RandomRange(r, filepath.Join(f.dir, tg.rel), inj, tg.off, tg.size)
		require.NoError(t, err)
		plan = append(plan, injection{i: i, kind: kind, rel: tg.rel, inj: inj, off: off, n: n})
	}
	res := outcomes{}
	// rollbacks counts the MANIFEST injections after which Pebble alone
	// opens another version without an error.
	var rollbacks atomic.Int64
	work := make(chan injection)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for in := range work {
				dir := filepath.Join(t.TempDir(), "store")
				copyDir(t, f.dir, dir)
				path := filepath.Join(dir, in.rel)
				what, err := faultfs.Damage(path, in.inj, in.off, in.n)
				if err != nil {
					t.Errorf("injection %d: %v", in.i, err)
					continue
				}
				desc := fmt.Sprintf("injection %d (seed %d): %s of %s (%s)", in.i, seed, what, in.rel, in.kind)
				if in.kind == "manifest" {
					if v := pebbleSSTs(filepath.Join(dir, "db")); v != "" && v != f.ssts {
						rollbacks.Add(1) // which check must refuse, as it refuses any other answer
					}
				}
				f.check(t, dir, desc, in.kind+" "+string(in.inj), namesWhat.MatchString, res)
				if err := os.RemoveAll(filepath.Dir(dir)); err != nil {
					t.Errorf("%v", err)
				}
			}
		}()
	}
	for _, in := range plan {
		if t.Failed() {
			break
		}
		work <- in
	}
	close(work)
	wg.Wait()
	t.Logf("%d injections in %s; outcomes per target and injection (ok: as the undamaged store; corrupt: an error marked as corruption naming what is corrupt):\n%s",
		*corruptionInjections, time.Since(start).Round(time.Millisecond), res.table("open", "reads", "stats", "verify", "resume"))
	t.Logf("after %d of %d MANIFEST injections, Pebble alone opens another version without an error", rollbacks.Load(), manifests)
	if manifests >= 16 {
		require.Positive(t, rollbacks.Load(), "no MANIFEST injection made Pebble open another version: the fixture shows nothing")
	}
}

// check runs every operation on the damaged store in dir; names reports
// whether an error message names what is damaged. It returns the error of
// the resume (nil if it finished).
func (f *fixture) check(t *testing.T, dir, desc, row string, names func(string) bool, res outcomes) (resumeErr error) {
	bad := func(op, format string, args ...any) {
		t.Errorf("%s: %s: %s", desc, op, fmt.Sprintf(format, args...))
	}
	// corrupt classifies an error: a corruption naming what is corrupt, or
	// a finding.
	corrupt := func(op string, err error) {
		switch {
		case !lsmstats.IsCorruption(err):
			bad(op, "an error that is not marked as corruption: %v", err)
		case !names(err.Error()):
			bad(op, "a corruption error that names nothing: %v", err)
		default:
			res.add(row, op, "corrupt")
		}
	}

	// Open and reads at several epochs.
	watchdog(t, desc+": open and reads", func() {
		s, err := lsm.Open(dir, f.readOnly())
		if err != nil {
			corrupt("open", err)
			res.add(row, "reads", "not-run")
			return
		}
		res.add(row, "open", "ok")
		defer s.Close()
		for _, e := range f.epochs {
			got, err := readAll(s, e)
			if err != nil {
				corrupt("reads", err)
				return
			}
			for k, want := range f.reads[e] {
				if got[k] != want {
					bad("reads", "epoch %d: %s differs from the undamaged store, and no error", e, k)
					return
				}
			}
		}
		res.add(row, "reads", "ok")
	})

	// The commands.
	watchdog(t, desc+": stats", func() {
		out, stderr, code := f.run("stats", dir, "--json")
		f.command(t, "stats", out, stderr, code, f.stats, names, bad, row, res)
	})
	watchdog(t, desc+": verify", func() {
		out, stderr, code := f.run("verify", dir)
		f.command(t, "verify", out, stderr, code, f.verify, names, bad, row, res)
	})

	// The backfill, resumed to its end.
	watchdog(t, desc+": resume", func() {
		err := resume(t, dir, f.obj)
		resumeErr = err
		switch {
		case err == nil:
			res.add(row, "resume", "ok")
		case errors.Is(err, errWrongResult):
			bad("resume", "%v", err)
		default:
			corrupt("resume", err)
		}
	})
	return resumeErr
}

// command classifies a command's outcome: exit 0 with the undamaged
// store's output, or exit 7 with a message that names what is corrupt.
func (f *fixture) command(t *testing.T, cmd, out, stderr string, code int, want string, names func(string) bool,
	bad func(op, format string, args ...any), row string, res outcomes) {
	switch code {
	case exitOK:
		if out != want {
			bad(cmd, "exit 0, but its output differs from the undamaged store's:\n%s\nwant:\n%s", out, want)
			return
		}
		res.add(row, cmd, "ok")
	case exitCorrupt:
		msg := commandMessage([]string{cmd}, stderr)
		if msg == "" || !names(msg+out) {
			bad(cmd, "exit 7 without a message naming what is corrupt: stdout:\n%s\nstderr:\n%s", out, stderr)
			return
		}
		res.add(row, cmd, "corrupt")
	default:
		bad(cmd, "exit %d: stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}

var errWrongResult = errors.New("wrong result")

// resume opens the backfill in dir (writable: the staging directory is
// cleared, Pebble compacts) and runs it to its end. A run that finishes
// must have an MV equal to its upstream table, and an upstream table equal
// to the workload's rows: else errWrongResult.
func resume(t *testing.T, dir string, obj *fixtureBucket) error {
	cfg := corruptionConfig(t, dir, obj)
	s, err := bench.Open(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx := context.Background()
	res, err := s.Job.Run(ctx)
	if err != nil {
		return err
	}
	if !res.Finished {
		return errors.Wrap(errWrongResult, "the job did not finish")
	}
	if err := s.Job.Compare(); err != nil {
		if lsmstats.IsCorruption(err) {
			return err
		}
		return errors.Wrapf(errWrongResult, "%v", err)
	}
	def, err := s.Store.Table(bench.UpstreamTable)
	if err != nil {
		return err
	}
	for v := 0; v < def.VnodeCount; v++ {
		var want [][2][]byte
		s.Gen.EachRow(uint16(v), func(pk, row []byte) {
			want = append(want, [2][]byte{slices.Clone(pk), slices.Clone(row)})
		})
		slices.SortFunc(want, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
		it, err := s.Store.NewIter(bench.UpstreamTable, uint16(v), nil, nil)
		if err != nil {
			return err
		}
		i := 0
		for ok := it.First(); ok; ok = it.Next() {
			if i >= len(want) || !bytes.Equal(it.PK(), want[i][0]) || !bytes.Equal(it.Row(), want[i][1]) {
				_ = it.Close()
				return errors.Wrapf(errWrongResult, "upstream vnode %d differs from the workload at row %d", v, i)
			}
			i++
		}
		if err := it.Close(); err != nil {
			return err
		}
		if i != len(want) {
			return errors.Wrapf(errWrongResult, "upstream vnode %d has %d rows, the workload %d", v, i, len(want))
		}
	}
	return nil
}

// watchdog runs fn, failing the test with every goroutine's stack if it
// takes longer than opTimeout, and turning a panic into a failure.
func watchdog(t *testing.T, what string, fn func()) {
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		fn()
	}()
	select {
	case p := <-done:
		if p != nil {
			t.Errorf("%s: panic: %v", what, p)
		}
	case <-time.After(opTimeout):
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%s: no answer after %s (a hang); goroutines:\n%s", what, opTimeout, buf)
	}
}

// count is the count of outcome key (op+" "+outcome) in row.
func (o outcomes) count(row, key string) int {
	outcomesMu.Lock()
	defer outcomesMu.Unlock()
	return o[row][key]
}

// table renders the outcomes of ops (each operation adds one outcome per
// injection): one line per target kind and injection.
func (o outcomes) table(ops ...string) string {
	rows := make([]string, 0, len(o))
	for k := range o {
		rows = append(rows, k)
	}
	sort.Strings(rows)
	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %4s", "target injection", "n")
	for _, op := range ops {
		fmt.Fprintf(&b, "  %-16s", op+" ok/corrupt")
	}
	b.WriteString("\n")
	for _, row := range rows {
		m := o[row]
		fmt.Fprintf(&b, "%-26s %4d", row, m["n"]/len(ops))
		for _, op := range ops {
			cell := fmt.Sprintf("%d/%d", m[op+" ok"], m[op+" corrupt"])
			if m[op+" not-run"] > 0 {
				cell += fmt.Sprintf(" (-%d)", m[op+" not-run"])
			}
			fmt.Fprintf(&b, "  %-16s", cell)
		}
		b.WriteString("\n")
	}
	return b.String()
}
