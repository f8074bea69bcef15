package lsm

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var crashKills = flag.Int("crash-kills", 24, "SIGKILLs of TestCrash")

const (
	crashChildEnv = "LSMSTATS_LSM_CRASH_CHILD"
	crashSeedEnv  = "LSMSTATS_LSM_CRASH_SEED"
	crashTable    = 1
	progressTable = 99
	crashPKs      = 3000
	opsPerStep    = 400
)

var crashPhases = []string{"buffering", "spilling", "committing", "idle"}

// crashGen is the deterministic workload of the crash test: step k's ops
// depend only on the seed, k and the state after step k-1.
type crashGen struct {
	seed  uint64
	state map[uint64]string
	def   TableDef
}

type crashOp struct {
	kind        opKind
	pk          uint64
	old, newRow string
}

func newCrashGen(seed uint64) *crashGen {
	g := &crashGen{seed: seed, state: map[uint64]string{}, def: TableDef{ID: crashTable, VnodeCount: 16, PK: keys.Schema{keys.Uint64}}}
	_ = g.def.normalize()
	return g
}

func (g *crashGen) step(k uint64) []crashOp {
	r := rand.New(rand.NewPCG(g.seed, k))
	ops := make([]crashOp, 0, opsPerStep)
	touched := map[uint64]bool{}
	for len(ops) < opsPerStep {
		pk := uint64(r.IntN(crashPKs))
		if touched[pk] {
			continue
		}
		touched[pk] = true
		row := fmt.Sprintf("row-%d-%d-%s", k, pk, strings.Repeat("x", r.IntN(64)))
		old, live := g.state[pk]
		switch {
		case !live:
			ops = append(ops, crashOp{opInsert, pk, "", row})
			g.state[pk] = row
		case r.IntN(3) == 0:
			ops = append(ops, crashOp{opDelete, pk, old, ""})
			delete(g.state, pk)
		default:
			ops = append(ops, crashOp{opUpdate, pk, old, row})
			g.state[pk] = row
		}
	}
	return ops
}

func crashOpen(dir string) (*Store, error) {
	s, err := Open(dir, &Options{MemoryWatermark: 48 << 10, Logger: QuietLogger(nil)})
	if err != nil {
		return nil, err
	}
	g := newCrashGen(0)
	if err := s.CreateTable(g.def); err != nil {
		return nil, err
	}
	if err := s.CreateTable(TableDef{ID: progressTable, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}); err != nil {
		return nil, err
	}
	return s, nil
}

// committedStep reads the workload step recorded with the last checkpoint.
func committedStep(s *Store) (uint64, error) {
	row, ok, err := s.Get(progressTable, 0, keys.AppendUint64(nil, 0))
	if err != nil || !ok {
		return 0, err
	}
	return binary.BigEndian.Uint64(row), nil
}

// newCrashGenAt returns the workload replayed to step k.
func newCrashGenAt(seed, k uint64) *crashGen {
	g := newCrashGen(seed)
	for i := uint64(1); i <= k; i++ {
		g.step(i)
	}
	return g
}

// write writes step's ops at epoch, each through the writer that w picks
// for its vnode, and moves the progress row to step through wp.
func (g *crashGen) write(step, epoch uint64, w func(vnode uint16) *Writer, wp *Writer) error {
	for _, op := range g.step(step) {
		pk := keys.AppendUint64(nil, op.pk)
		vn := g.def.VnodeOf(pk)
		var err error
		switch op.kind {
		case opInsert:
			err = w(vn).Insert(epoch, vn, pk, []byte(op.newRow))
		case opDelete:
			err = w(vn).Delete(epoch, vn, pk, []byte(op.old))
		default:
			err = w(vn).Update(epoch, vn, pk, []byte(op.old), []byte(op.newRow))
		}
		if err != nil {
			return err
		}
	}
	zero := keys.AppendUint64(nil, 0)
	prog := binary.BigEndian.AppendUint64(nil, step)
	if step == 1 {
		return wp.Insert(epoch, 0, zero, prog)
	}
	return wp.Update(epoch, 0, zero, binary.BigEndian.AppendUint64(nil, step-1), prog)
}

// crashSay prints one line of a crash child's report.
func crashSay(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// openCrashChild opens a crash child's store, has it report its phases
// ("P <phase>") and returns the workload replayed to the committed step k.
func openCrashChild(dir string, seed uint64) (*Store, *crashGen, uint64, error) {
	s, err := crashOpen(dir)
	if err != nil {
		return nil, nil, 0, err
	}
	s.hooks.phase = func(p string) { crashSay("P %s", p) }
	k, err := committedStep(s)
	if err != nil {
		return nil, nil, 0, err
	}
	return s, newCrashGenAt(seed, k), k, nil
}

// childRand returns the random source of a crash child that resumes after
// committed step k: its epoch gaps and sleeps follow from the test's seed
// and k, so that a rerun with the same seed makes the same choices (only the
// kills' timing differs).
func childRand(seed, k uint64) *rand.Rand { return rand.New(rand.NewPCG(seed^0xc4a5c4, k)) }

// crashChild runs the workload until killed; it returns only on an error.
// It prints "P <phase>" at each phase change and "C <step>" after each
// commit returns.
func crashChild(dir string, seed uint64) error {
	s, g, k, err := openCrashChild(dir, seed)
	if err != nil {
		return err
	}
	lo, hi := roaring.New(), roaring.New()
	lo.AddRange(0, 8)
	hi.AddRange(8, 16)
	wlo, err := s.NewWriter(crashTable, lo, nil)
	if err != nil {
		return err
	}
	whi, err := s.NewWriter(crashTable, hi, nil)
	if err != nil {
		return err
	}
	wp, err := s.NewWriter(progressTable, nil, nil)
	if err != nil {
		return err
	}
	half := func(vn uint16) *Writer {
		if vn >= 8 {
			return whi
		}
		return wlo
	}
	epoch := s.EpochFloor()
	r := childRand(seed, k)
	for step := k + 1; ; step++ {
		epoch += 1 + uint64(r.IntN(3))
		crashSay("P buffering")
		if err := g.write(step, epoch, half, wp); err != nil {
			return err
		}
		for _, w := range []*Writer{wlo, whi, wp} {
			if err := w.Seal(epoch); err != nil {
				return err
			}
		}
		if err := s.Commit(epoch); err != nil {
			return err
		}
		crashSay("C %d", step)
		crashSay("P idle")
		time.Sleep(time.Duration(r.IntN(3000)) * time.Microsecond)
	}
}

// TestCrash kills a child process that writes, spills and commits with
// SIGKILL at random moments, then reopens the store and checks that the last
// committed checkpoint is complete and nothing later is visible.
func TestCrash(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 2))
	dir := t.TempDir()
	hit := map[string]int{}
	missing := func() []string { return testutil.Missing(crashPhases, hit) }
	var lastStep uint64
	// At least *crashKills kills; beyond that, keep aiming at phases no
	// kill has landed in yet (short phases are hard to hit), up to 3x.
	for kill := 0; kill < *crashKills || len(missing()) > 0 && kill < 3**crashKills; kill++ {
		target := crashPhases[kill%len(crashPhases)]
		if kill >= *crashKills {
			target = missing()[0]
		}
		// Phases other than idle last a millisecond or less: kill soon after
		// one starts, to land inside it.
		delay := time.Duration(r.IntN(300)) * time.Microsecond
		if target == "idle" {
			delay = time.Duration(r.IntN(2500)) * time.Microsecond
		}
		phase, printed := runCrashChild(t, dir, seed, target, delay)
		hit[phase]++

		s, k := reopenAfterCrash(t, dir, seed, printed, lastStep, fmt.Sprintf("kill %d", kill))
		lastStep = k
		require.NoError(t, s.Close())
	}
	t.Logf("kills per phase: %v; last committed step %d", hit, lastStep)
	for _, p := range crashPhases {
		require.Positive(t, hit[p], "no kill landed in phase %q (hits %v)", p, hit)
	}
}

// runCrashChild starts the child, kills it delay after it enters phase target
// and returns the phase it was in and the last step it reported committed.
func runCrashChild(t *testing.T, dir string, seed uint64, target string, delay time.Duration) (string, uint64) {
	c := testutil.StartChild(t, os.Stderr, crashChildEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed, 10))
	phase, step := "", uint64(0)
	var recent []string
	handle := func(l string) {
		recent = append(recent, l)
		switch {
		case strings.HasPrefix(l, "P "):
			phase = l[2:]
		case strings.HasPrefix(l, "C "):
			step, _ = strconv.ParseUint(l[2:], 10, 64)
			phase = "idle" // Commit returned
		case strings.HasPrefix(l, "E "):
			t.Fatalf("child failed: %s", l[2:])
		}
	}
	// Let at least one commit happen so kills spread over the history.
	reached := c.ReadUntil(20*time.Second, func(l string) bool {
		handle(l)
		return phase == target && step > 0
	})
	if reached == testutil.Ended {
		t.Fatalf("child exited early: %v", c.Wait().Err)
	}
	if os.Getenv("CRASH_DEBUG") != "" {
		t.Logf("target %s, phase at kill %s", target, phase)
	}
	c.KillAfter(t, delay, handle)
	end := c.Wait()
	require.True(t, end.Killed, "the child must die by SIGKILL: %v", end.Err)
	if os.Getenv("CRASH_DEBUG") != "" {
		t.Logf("last lines: %q", recent[max(0, len(recent)-8):])
	}
	return phase, step
}

// reopenAfterCrash reopens the store after a child's crash and checks the
// committed step k: no commit the child reported returned (printed) is
// lost, at most the one in flight is also there, no earlier step
// (lastStep) is lost, and the rows are those of step k (checkCrashState).
// It returns the open store and k; what names the crash in messages.
func reopenAfterCrash(t *testing.T, dir string, seed, printed, lastStep uint64, what string) (*Store, uint64) {
	s, err := crashOpen(dir)
	require.NoError(t, err, what)
	k, err := committedStep(s)
	require.NoError(t, err)
	require.GreaterOrEqual(t, k, printed, "%s: a commit that returned was lost", what)
	require.LessOrEqual(t, k, printed+1, what)
	require.GreaterOrEqual(t, k, lastStep)
	checkCrashState(t, s, seed, k)
	return s, k
}

// checkCrashState compares the reopened store with the workload replayed to
// step k: every row, no version above the committed epoch, live counts.
func checkCrashState(t *testing.T, s *Store, seed, k uint64) {
	g := newCrashGenAt(seed, k)
	got := map[uint64]string{}
	for v := 0; v < g.def.VnodeCount; v++ {
		it, err := s.NewIter(crashTable, uint16(v), nil, nil)
		require.NoError(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			pk, _, _ := keys.DecodeUint64(it.PK())
			got[pk] = string(it.Row())
		}
		require.NoError(t, it.Close())
	}
	require.Equal(t, len(g.state), len(got), "rows at step %d", k)
	require.Equal(t, g.state, got, "rows at step %d", k)
	// Nothing of a later epoch reached Pebble.
	lo, hi := keys.TableSpan(crashTable)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	for ok := it.First(); ok; ok = it.Next() {
		dk, err := keys.Decode(it.Key())
		require.NoError(t, err)
		require.LessOrEqual(t, dk.Version.Epoch(), s.CommittedEpoch(), "uncommitted version %s visible", dk)
	}
	require.NoError(t, it.Close())
	var rows, byts int64
	for _, row := range g.state {
		rows++
		byts += int64(8 + len(row))
	}
	live := s.Stats().Live.Table(crashTable)
	require.Equal(t, rows, live.Rows, "live rows")
	require.Equal(t, byts, live.Bytes, "live bytes")
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences, "verify after a crash")
}
