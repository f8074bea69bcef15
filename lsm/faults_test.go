package lsm

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// ddFaults holds the fault-injection commands of TestDataDriven
// (testdata/faults):
//
//	inject kinds=K1|K2 path=REGEX [skip=N] [times=N]
//	                     arm a rule of the file's fault injector: fail
//	                     operations of those kinds (faultfs.Kind) on paths
//	                     (relative to the store directory) matching REGEX,
//	                     after skip matching ones, times times (0: always)
//	disarm               remove every rule
//	faults               faults injected so far, per kind
type ddFaults struct {
	f *faultInjector
}

func (d *ddFaults) run(t *testing.T, td *datadriven.TestData) (string, bool) {
	switch td.Cmd {
	case "inject":
		skip, times := int(argUintDefault(td, "skip", 0)), int(argUintDefault(td, "times", 0))
		r := d.f.arm(argString(t, td, "kinds"), argString(t, td, "path"), skip, times, 0)
		return "armed: " + r.String(), true
	case "disarm":
		d.f.disarm()
		return "ok", true
	case "faults":
		return d.f.summary(), true
	}
	return "", false
}

// faultTable is the table of the fault tests: u64 pks, 8 vnodes.
var faultTable = TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}

// faultStore is a store on a fault injector with a model of its committed
// rows.
type faultStore struct {
	t    *testing.T
	dir  string
	f    *faultInjector
	opts Options
	s    *Store
	def  TableDef
	w    *Writer
	// committed is the model: the rows of the last committed epoch.
	committed map[uint64]string
	epoch     uint64
}

func newFaultStore(t *testing.T, seed uint64, opts Options) *faultStore {
	dir := t.TempDir()
	fs := &faultStore{t: t, dir: dir, f: newFaultInjector(dir, seed), opts: opts, committed: map[uint64]string{}}
	fs.opts.FS = fs.f.fs()
	if fs.opts.Logger == nil {
		fs.opts.Logger = QuietLogger(nil)
	}
	logFaults(t, fs.f)
	fs.open()
	t.Cleanup(func() {
		if fs.s != nil {
			_ = fs.s.Close()
		}
	})
	return fs
}

// open (re)opens the store with faults disarmed and checks it against the
// model.
func (fs *faultStore) open() {
	fs.f.disarm()
	s, err := Open(fs.dir, &fs.opts)
	require.NoError(fs.t, err)
	fs.s = s
	require.NoError(fs.t, s.CreateTable(faultTable))
	fs.def, err = s.Table(faultTable.ID)
	require.NoError(fs.t, err)
	fs.w, err = s.NewWriter(faultTable.ID, nil, nil)
	require.NoError(fs.t, err)
	fs.epoch = s.EpochFloor()
	fs.check("open")
	// Nothing staged survives a restart.
	names, err := fs.opts.FS.List(fs.s.staging)
	require.NoError(fs.t, err)
	require.Empty(fs.t, names, "staging directory after open")
}

// reopen closes the store (a Close error is fine while faults are armed)
// and opens it again with faults disarmed.
func (fs *faultStore) reopen() {
	if err := fs.s.Close(); err != nil {
		require.True(fs.t, isInjected(err), "close: %v", err)
	}
	fs.s = nil
	fs.open()
}

// check compares every row with the model, makes sure no version above the
// committed epoch reached Pebble, and verifies the statistics.
func (fs *faultStore) check(when string) {
	t := fs.t
	require.Equal(t, fs.committed, readSnapOf(t, fs.s, fs.def), "rows %s", when)
	for _, rv := range rawVersions(t, fs.s, fs.def.ID) {
		require.LessOrEqual(t, rv.v.Epoch(), fs.s.CommittedEpoch(), "%s: uncommitted version %s visible", when, rv)
	}
	rep, err := fs.s.Verify()
	require.NoError(t, err, when)
	require.Empty(t, rep.Differences, "verify %s", when)
	live := fs.s.Stats().Live.Table(fs.def.ID)
	require.EqualValues(t, len(fs.committed), live.Rows, "live rows %s", when)
}

func readSnapOf(t *testing.T, s *Store, def TableDef) map[uint64]string {
	sn, err := s.Snapshot()
	require.NoError(t, err)
	defer sn.Close()
	return readSnap(t, sn, def)
}

// TestFaultsOpen fails each operation of Open in turn, on a new store and
// on one with data: Open returns the error (or, when Pebble works around
// the fault, succeeds), leaks no goroutine, and a clean reopen finds every
// committed row. Faults on Pebble's OPTIONS file and its directory listing
// after the WAL is set up leak a goroutine of Pebble's compaction scheduler
// (a Pebble bug, see the report), and WAL/MANIFEST faults are fatal: those
// run in faults_crash_test.go.
func TestFaultsOpen(t *testing.T) {
	const paths = `^(\.|staging.*|db|db/LOCK|db/OPTIONS-\d+|db/\d+\.sst)$`
	counts := map[string]int{}
	outcomes := map[string]int{}
	for _, fresh := range []bool{true, false} {
		for _, kind := range []string{"create", "open", "read", "remove", "mkdir", "stat", "write", "sync", "link"} {
			for skip := 0; ; skip++ {
				dir := t.TempDir()
				f := newFaultInjector(dir, 1)
				opts := &Options{FS: f.fs(), Logger: QuietLogger(nil), MemoryWatermark: -1}
				want := map[uint64]string{}
				if !fresh {
					s, err := Open(dir, opts)
					require.NoError(t, err)
					require.NoError(t, s.CreateTable(faultTable))
					w, err := s.NewWriter(faultTable.ID, nil, nil)
					require.NoError(t, err)
					for pk := uint64(0); pk < 40; pk++ {
						k := keys.AppendUint64(nil, pk)
						require.NoError(t, w.Insert(5, faultTable.VnodeOf(k), k, []byte("row")))
						want[pk] = "row"
					}
					require.NoError(t, w.Seal(5))
					require.NoError(t, s.Commit(5))
					require.NoError(t, s.Close())
				}
				f.arm(kind, paths, skip, 1, 0)
				before := goleak.IgnoreCurrent()
				s, err := Open(dir, opts)
				n := f.total()
				f.disarm()
				if err != nil {
					require.True(t, isInjected(err), "open with %s fault #%d: %v", kind, skip, err)
					outcomes["error"]++
				} else {
					if n > 0 {
						outcomes["worked around"]++
					}
					require.NoError(t, s.Close())
				}
				require.NoError(t, goleak.Find(before), "open with %s fault #%d (%v)", kind, skip, err)
				s, err = Open(dir, &Options{Logger: QuietLogger(nil), MemoryWatermark: -1})
				require.NoError(t, err)
				if !fresh {
					def, err := s.Table(faultTable.ID)
					require.NoError(t, err)
					require.Equal(t, want, readSnapOf(t, s, def))
					rep, err := s.Verify()
					require.NoError(t, err)
					require.Empty(t, rep.Differences)
				}
				require.NoError(t, s.Close())
				counts[kind] += n
				if n == 0 {
					break // past the last operation of this kind
				}
			}
		}
	}
	t.Logf("faults injected per kind: %s; outcomes %v", formatCounts(counts), outcomes)
	require.Positive(t, outcomes["error"])
}

// TestFaultsStatsRefresh: the statistics refresh at the end of a commit
// cannot read the new SSTs' properties. The commit stands (it is durable),
// Stats says the physical side is stale, and once the fault is gone the
// tracker catches up by itself, with no further store operation: before the
// fix, a failed refresh was only logged, and the physical statistics stayed
// behind until some later event.
func TestFaultsStatsRefresh(t *testing.T) {
	fs := newFaultStore(t, 1, Options{MemoryWatermark: -1, CommitBatchBytes: -1}) // ingested checkpoints
	m := stats.NewMetrics(fs.s.Stats, nil)
	for e := uint64(1); e <= 3; e++ {
		fs.epoch++
		for i := 0; i < 50; i++ {
			pk := e*100 + uint64(i)
			k := keys.AppendUint64(nil, pk)
			require.NoError(t, fs.w.Insert(fs.epoch, fs.def.VnodeOf(k), k, []byte("row")))
			fs.committed[pk] = "row"
		}
		require.NoError(t, fs.w.Seal(fs.epoch))
		// Every read of an SST in Pebble's directory fails while the commit
		// refreshes the statistics (and while the background goroutine
		// retries).
		fs.f.arm("open|read", `^db/\d+\.sst$`, 0, 0, 0)
		require.NoError(t, fs.s.Commit(fs.epoch), "the checkpoint is durable: Commit succeeds")
		st := fs.s.Stats()
		require.Error(t, st.PhysicalErr, "stale physical statistics must be reported")
		require.True(t, isInjected(st.PhysicalErr), "%v", st.PhysicalErr)
		require.EqualValues(t, len(fs.committed), st.Live.Table(1).Rows, "live statistics are exact")
		require.Less(t, st.Physical.Table(1).TotalKeyCount, uint64(len(fs.committed)))
		requireStale(t, m, 1)
		fs.f.disarm()
		deadline := time.Now().Add(10 * time.Second)
		for {
			st = fs.s.Stats()
			if st.PhysicalErr == nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "the physical statistics never caught up: %v", st.PhysicalErr)
			time.Sleep(5 * time.Millisecond)
		}
		require.EqualValues(t, len(fs.committed), st.Physical.Table(1).TotalKeyCount)
		requireStale(t, m, 0)
	}
	fs.check("end")
}

// requireStale compares the physical_stale gauge of m with want.
func requireStale(t *testing.T, m *stats.Metrics, want int) {
	t.Helper()
	require.NoError(t, testutil.CollectAndCompare(m, strings.NewReader(fmt.Sprintf(`
# HELP lsmstats_stats_physical_stale 1 if the last refresh of the physical statistics failed, so that they describe an earlier set of SSTs until a retry succeeds, else 0.
# TYPE lsmstats_stats_physical_stale gauge
lsmstats_stats_physical_stale %d
`, want)), "lsmstats_stats_physical_stale"))
}

var faultSteps = flag.Int("fault-steps", 120, "steps of TestFaultsRandom")

// faultRules are the rules TestFaultsRandom picks from: every kind of
// operation the store and Pebble perform on the store's own staged files and
// on Pebble's SSTs (compaction and ingestion outputs, opening them for reads,
// the statistics refresh). Reads of Pebble's SSTs fail only in
// faults_crash_test.go: a read error while a compaction elides a SINGLEDEL
// (what GC writes) makes Pebble panic (compact.Iter.
// skipDueToSingleDeleteElision), which only a child process survives.
var faultRules = []struct{ kinds, path string }{
	{"create|write|sync", `^staging/spill-`},
	{"open|read", `^staging/spill-`},
	{"create|write|sync", `^staging/ingest-`},
	{"open|read", `^staging/ingest-`},
	{"link", `^staging/ingest-`},
	{"remove", `^staging/`},
	{"create|write|sync", `^db/\d+\.sst$`},
	{"open|stat", `^db/\d+\.sst$`},
	{"remove", `^db/\d+\.sst$`},
	{"create|write|sync|open|remove|link|stat", `.`},
	{"read", `^staging/`},
}

// TestFaultsRandom runs a workload of writes, spills, commits, GC passes,
// manual compactions, Pebble's background compactions, reads, Verify and
// reopens, with random faults armed around each step. Every operation that
// fails returns an error that carries the injected fault (or ErrFailed,
// whose cause it is); a failed commit publishes nothing and is retried; a
// store that refuses writes is reopened. Reads that succeed always match the
// model, and after every reopen and at the end every committed row is there,
// nothing uncommitted is, and Verify finds no difference.
func TestFaultsRandom(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 7))
	var bgErrors atomic.Int64
	// No commit back-pressure: after a failed compaction Pebble keeps the
	// input spans out of compactions for 30 s ("problem spans"), so L0 would
	// reach the stop threshold and each commit would wait until the store
	// gives up (a second without a compaction running, see waitForL0):
	// thousands of steps would take hours. TestCommitStallOnlyWhileCompactionsDrain
	// covers the wait under failing compactions.
	//
	// Every checkpoint is ingested (CommitBatchBytes -1): without the
	// commit back-pressure, L0 passes Pebble's L0StopWritesThreshold while
	// the problem spans keep it from compacting, and from then on every
	// flush of checkpoints in the memtable (Verify's, a GC batch's) fails
	// at once (Store.memtableStall). TestFaultsFlush covers that path.
	fs := newFaultStore(t, seed, Options{
		MemoryWatermark: 12 << 10, TargetFileSize: 8 << 10, L0StopSublevels: -1, CommitBatchBytes: -1,
		EventListener: &pebble.EventListener{BackgroundError: func(error) { bgErrors.Add(1) }},
	})
	ctx := context.Background()
	outcomes := map[string]int{}
	injected := func(what string, err error) {
		t.Helper()
		require.True(t, isInjected(err) || errors.Is(err, ErrFailed), "%s: %v", what, err)
		outcomes[what+" failed"]++
	}
	failed := func() bool { return errors.Is(fs.s.checkWritable(), ErrFailed) }
	nextPK := uint64(0)
	for step := 0; step < *faultSteps; step++ {
		if r.IntN(3) > 0 {
			rule := faultRules[r.IntN(len(faultRules))]
			prob := []float64{0, 0.3, 0.05}[r.IntN(3)]
			fs.f.arm(rule.kinds, rule.path, r.IntN(12), 1+r.IntN(3), prob)
		}
		// One epoch of ops on top of the committed rows.
		fs.epoch++
		pending := maps.Clone(fs.committed)
		live := slices.Sorted(maps.Keys(pending))
		n := 20 + r.IntN(120)
		for i := 0; i < n && !failed(); i++ {
			var pk uint64
			kind := opInsert
			if len(live) > 0 && r.IntN(3) > 0 {
				pk = live[r.IntN(len(live))]
				kind = opUpdate
				if r.IntN(3) == 0 {
					kind = opDelete
				}
			} else {
				pk = nextPK
				nextPK++
			}
			old, ok := pending[pk]
			if kind != opInsert && !ok {
				continue // deleted earlier in this epoch
			}
			k := keys.AppendUint64(nil, pk)
			vn := fs.def.VnodeOf(k)
			row := fmt.Sprintf("r%d.%d.%s", fs.epoch, pk, strings.Repeat("x", r.IntN(80)))
			var err error
			switch kind {
			case opInsert:
				err = fs.w.Insert(fs.epoch, vn, k, []byte(row))
			case opUpdate:
				err = fs.w.Update(fs.epoch, vn, k, []byte(old), []byte(row))
			default:
				err = fs.w.Delete(fs.epoch, vn, k, []byte(old))
			}
			if err != nil {
				// A read fault of a checked op changes nothing; a spill
				// fault fails the store (the op is buffered).
				injected("write", err)
				continue
			}
			if kind == opDelete {
				delete(pending, pk)
			} else {
				pending[pk] = row
				if kind == opInsert {
					live = append(live, pk)
				}
			}
		}
		if !failed() {
			if err := fs.w.Seal(fs.epoch); err != nil {
				injected("seal", err)
			}
		}
		if !failed() {
			err := fs.s.Commit(fs.epoch)
			if err != nil {
				injected("commit", err)
				require.NotEqual(t, fs.epoch, fs.s.CommittedEpoch(), "a failed commit published its epoch")
				if !failed() {
					// Nothing was published: the retry commits it all.
					fs.f.disarm()
					require.NoError(t, fs.s.Commit(fs.epoch), "retry of commit %d", fs.epoch)
					outcomes["commit retried"]++
					err = nil
				}
			}
			if err == nil {
				fs.committed = pending
				outcomes["committed"]++
			}
		}
		if failed() {
			outcomes["reopened after ErrFailed"]++
			fs.reopen()
			continue
		}
		// Reads that succeed are right.
		for i := 0; i < 5 && len(fs.committed) > 0; i++ {
			pk := live[r.IntN(len(live))]
			k := keys.AppendUint64(nil, pk)
			row, ok, err := fs.s.Get(fs.def.ID, fs.def.VnodeOf(k), k)
			if err != nil {
				injected("read", err)
				continue
			}
			want, wantOK := fs.committed[pk]
			require.Equal(t, wantOK, ok, "pk %d", pk)
			require.Equal(t, want, string(row), "pk %d", pk)
		}
		switch r.IntN(8) {
		case 0, 1:
			res, err := fs.s.GC(ctx, GCRequest{Table: fs.def.ID, BatchSize: 1 + r.IntN(200)})
			if err != nil {
				injected("gc", err)
				require.NotNil(t, res.Resume, "a failed GC pass says where to resume")
			} else {
				outcomes["gc"]++
			}
		case 2:
			if err := fs.s.CompactRange(ctx, fs.def.ID, r.IntN(4), 4+r.IntN(4)); err != nil {
				injected("compact", err)
			} else {
				outcomes["compact"]++
			}
		case 3:
			rep, err := fs.s.Verify()
			if err != nil {
				injected("verify", err)
			} else {
				require.Empty(t, rep.Differences, "a Verify that succeeds under faults is right")
			}
		case 4:
			if r.IntN(3) == 0 {
				outcomes["reopened"]++
				fs.reopen()
				continue
			}
		}
		fs.f.disarm()
		if step%20 == 19 {
			fs.check(fmt.Sprintf("step %d", step))
		}
	}
	fs.reopen()
	t.Logf("outcomes: %v; Pebble background errors: %d", outcomes, bgErrors.Load())
	require.Positive(t, outcomes["committed"])
	require.Positive(t, fs.f.total())
}

// TestFaultsCompaction: every SST that Pebble writes fails, so its
// background compactions of the checkpoints' L0 files fail and are retried,
// and so does a manual compaction, and then a flush. Commits, which ingest
// files written by the store, go on; reads stay right; once the fault is
// gone the LSM is compacted, the flush lands, and nothing was lost.
func TestFaultsCompaction(t *testing.T) {
	var compactionErrs, flushErrs atomic.Int64
	fs := newFaultStore(t, 1, Options{
		MemoryWatermark: -1, L0StopSublevels: -1, CommitBatchBytes: -1, // ingested checkpoints
		EventListener: &pebble.EventListener{
			CompactionEnd: func(info pebble.CompactionInfo) {
				if info.Err != nil {
					compactionErrs.Add(1)
				}
			},
			FlushEnd: func(info pebble.FlushInfo) {
				if info.Err != nil {
					flushErrs.Add(1)
				}
			},
		},
	})
	fs.f.arm("create|write|sync", `^db/\d+\.sst$`, 0, 0, 0)
	for e := 0; e < 16 || compactionErrs.Load() == 0; e++ {
		require.Less(t, e, 500, "no background compaction ran")
		fs.epoch++
		for i := 0; i < 20; i++ {
			pk := uint64(i)
			k := keys.AppendUint64(nil, pk)
			row := fmt.Sprintf("row-%d-%d", fs.epoch, pk)
			var err error
			if old, ok := fs.committed[pk]; ok {
				err = fs.w.Update(fs.epoch, fs.def.VnodeOf(k), k, []byte(old), []byte(row))
			} else {
				err = fs.w.Insert(fs.epoch, fs.def.VnodeOf(k), k, []byte(row))
			}
			require.NoError(t, err)
			fs.committed[pk] = row
		}
		require.NoError(t, fs.w.Seal(fs.epoch))
		require.NoError(t, fs.s.Commit(fs.epoch))
		require.Equal(t, fs.committed, readSnapOf(t, fs.s, fs.def))
	}
	err := fs.s.CompactRange(context.Background(), fs.def.ID, 0, 0)
	require.True(t, isInjected(err), "%v", err)
	l0 := fs.s.Metrics().L0Files
	fs.f.disarm()
	require.NoError(t, fs.s.CompactRange(context.Background(), fs.def.ID, 0, 0))
	require.Less(t, fs.s.Metrics().L0Files, l0)
	fs.check("after the faults")
	// The metadata SSTs of every checkpoint are still in L0, whose depth
	// would stall memtable writes (Pebble's own write stall).
	require.NoError(t, fs.s.db.Compact(context.Background(), []byte{0}, []byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, true))

	// A flush: the store never writes to the memtable, but a tool sharing
	// the DB may (here: a version of a table outside the catalog). Pebble
	// retries the failed flush until it succeeds.
	fs.f.arm("create|write|sync", `^db/\d+\.sst$`, 0, 0, 0)
	key := keys.AppendVersioned(nil, 77, 0, keys.AppendUint64(nil, 1), keys.MakeVersion(1, 0), keys.KindPut)
	require.NoError(t, fs.s.db.Set(key, []byte("tool"), pebble.Sync))
	flushed, err := fs.s.db.AsyncFlush()
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for flushErrs.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "the flush never failed")
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, fs.committed, readSnapOf(t, fs.s, fs.def), "reads while flushes fail")
	fs.f.disarm()
	select {
	case <-flushed:
	case <-time.After(10 * time.Second):
		t.Fatal("the flush never finished")
	}
	require.NoError(t, fs.s.tracker.Refresh())
	require.EqualValues(t, 1, fs.s.Stats().Physical.Table(77).TotalKeyCount)
	fs.check("after the flush")
	t.Logf("failed background compactions: %d, failed flushes: %d", compactionErrs.Load(), flushErrs.Load())
	fs.reopen()
}
