package lsm

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/pebble/v2"
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
	s, err := Open(dir, &Options{MemoryWatermark: 48 << 10, Logger: QuietLogger{}})
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

// crashChild runs the workload until killed. It prints "P <phase>" at each
// phase change and "C <step>" after each commit returns.
func crashChild(dir string, seed uint64) {
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	fail := func(err error) {
		say("E %v", err)
		os.Exit(3)
	}
	s, err := crashOpen(dir)
	if err != nil {
		fail(err)
	}
	s.hooks.phase = func(p string) { say("P %s", p) }
	k, err := committedStep(s)
	if err != nil {
		fail(err)
	}
	g := newCrashGen(seed)
	for i := uint64(1); i <= k; i++ {
		g.step(i)
	}
	lo, hi := roaring.New(), roaring.New()
	lo.AddRange(0, 8)
	hi.AddRange(8, 16)
	wlo, err := s.NewWriter(crashTable, lo, nil)
	if err != nil {
		fail(err)
	}
	whi, err := s.NewWriter(crashTable, hi, nil)
	if err != nil {
		fail(err)
	}
	wp, err := s.NewWriter(progressTable, nil, nil)
	if err != nil {
		fail(err)
	}
	epoch := s.EpochFloor()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	for step := k + 1; ; step++ {
		epoch += 1 + uint64(r.IntN(3))
		say("P buffering")
		for _, op := range g.step(step) {
			pk := keys.AppendUint64(nil, op.pk)
			vn := g.def.VnodeOf(pk)
			w := wlo
			if vn >= 8 {
				w = whi
			}
			switch op.kind {
			case opInsert:
				err = w.Insert(epoch, vn, pk, []byte(op.newRow))
			case opDelete:
				err = w.Delete(epoch, vn, pk, []byte(op.old))
			default:
				err = w.Update(epoch, vn, pk, []byte(op.old), []byte(op.newRow))
			}
			if err != nil {
				fail(err)
			}
		}
		zero := keys.AppendUint64(nil, 0)
		prog := binary.BigEndian.AppendUint64(nil, step)
		if step == 1 {
			err = wp.Insert(epoch, 0, zero, prog)
		} else {
			err = wp.Update(epoch, 0, zero, binary.BigEndian.AppendUint64(nil, step-1), prog)
		}
		if err != nil {
			fail(err)
		}
		for _, w := range []*Writer{wlo, whi, wp} {
			if err := w.Seal(epoch); err != nil {
				fail(err)
			}
		}
		if err := s.Commit(epoch); err != nil {
			fail(err)
		}
		say("C %d", step)
		say("P idle")
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
	missing := func() []string {
		var out []string
		for _, p := range crashPhases {
			if hit[p] == 0 {
				out = append(out, p)
			}
		}
		return out
	}
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

		s, err := crashOpen(dir)
		require.NoError(t, err)
		k, err := committedStep(s)
		require.NoError(t, err)
		require.GreaterOrEqual(t, k, printed, "kill %d: a commit that returned was lost", kill)
		require.LessOrEqual(t, k, printed+1, "kill %d", kill)
		require.GreaterOrEqual(t, k, lastStep)
		lastStep = k
		checkCrashState(t, s, seed, k)
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
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashSeedEnv+"="+strconv.FormatUint(seed, 10))
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
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
	deadline := time.After(20 * time.Second)
	// Let at least one commit happen so kills spread over the history.
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("child exited early: %v", cmd.Wait())
			}
			handle(l)
			if phase == target && step > 0 {
				break wait
			}
		case <-deadline:
			break wait
		}
	}
	time.Sleep(delay)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	if os.Getenv("CRASH_DEBUG") != "" {
		t.Logf("target %s, phase at kill %s", target, phase)
	}
	for l := range lines {
		handle(l)
	}
	err = cmd.Wait()
	require.Error(t, err, "the child must die by SIGKILL")
	if os.Getenv("CRASH_DEBUG") != "" {
		t.Logf("last lines: %q", recent[max(0, len(recent)-8):])
	}
	return phase, step
}

// checkCrashState compares the reopened store with the workload replayed to
// step k: every row, no version above the committed epoch, live counts.
func checkCrashState(t *testing.T, s *Store, seed, k uint64) {
	g := newCrashGen(seed)
	for i := uint64(1); i <= k; i++ {
		g.step(i)
	}
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
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
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
	live := s.Live().Table(crashTable)
	require.Equal(t, rows, live.Rows, "live rows")
	require.Equal(t, byts, live.Bytes, "live bytes")
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences, "verify after a crash")
}
