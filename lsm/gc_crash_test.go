package lsm

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var gcCrashKills = flag.Int("gc-crash-kills", 12, "SIGKILLs of TestGCCrash")

// gcCrashChildEnv, set with crashChildEnv, makes the child run
// gcCrashChild: the workload of TestCrash with a GC pass (and sometimes a
// compaction) after every commit.
const gcCrashChildEnv = "LSMSTATS_LSM_GC_CRASH_CHILD"

// gcCrashPhases are the phases TestGCCrash aims its kills at.
var gcCrashPhases = []string{"gc-scanning", "gc-ingesting", "gc-compacting", "committing"}

// gcCrashChild runs the crash workload with GC until killed. Besides the
// lines of crashChild it prints "P gc-scanning", "P gc-ingesting" and
// "P gc-compacting" from the store's phase hook.
func gcCrashChild(dir string, seed uint64) {
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
	w, err := s.NewWriter(crashTable, nil, nil)
	if err != nil {
		fail(err)
	}
	wp, err := s.NewWriter(progressTable, nil, nil)
	if err != nil {
		fail(err)
	}
	epoch := s.EpochFloor()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0))
	var pin *Snapshot
	ctx := context.Background()
	for step := k + 1; ; step++ {
		epoch += 1 + uint64(r.IntN(3))
		say("P buffering")
		for _, op := range g.step(step) {
			pk := keys.AppendUint64(nil, op.pk)
			vn := g.def.VnodeOf(pk)
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
		for _, w := range []*Writer{w, wp} {
			if err := w.Seal(epoch); err != nil {
				fail(err)
			}
		}
		if err := s.Commit(epoch); err != nil {
			fail(err)
		}
		say("C %d", step)
		// Hold a pin now and then, so that some passes collect below the
		// committed epoch.
		switch {
		case pin == nil && r.IntN(3) == 0:
			if pin, err = s.Snapshot(); err != nil {
				fail(err)
			}
		case pin != nil && r.IntN(3) == 0:
			pin.Close()
			pin = nil
		}
		lo := r.IntN(g.def.VnodeCount)
		hi := lo + 1 + r.IntN(g.def.VnodeCount-lo)
		res, err := s.GC(ctx, GCRequest{Table: crashTable, VnodeLo: lo, VnodeHi: hi, BatchSize: 16 + r.IntN(112)})
		if err != nil {
			fail(err)
		}
		say("G %d %d", res.SafeEpoch, res.Deleted)
		if r.IntN(3) == 0 {
			if err := s.CompactRange(ctx, crashTable, lo, hi); err != nil {
				fail(err)
			}
		}
		say("P idle")
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
	}
}

// TestGCCrash is acceptance 3: a child process that commits and runs GC
// passes (in small batches, some below a pinned epoch) and compactions is
// killed with SIGKILL at random moments, mostly inside GC; after each kill
// the reopened store has every committed row, no uncommitted version, live
// and physical statistics equal to a recomputation (Verify), a durable
// watermark at or below the committed epoch, and correct rows at a random
// readable epoch down to the watermark. At the end a full pass and a
// compaction leave one entry per live row.
func TestGCCrash(t *testing.T) {
	t.Setenv(gcCrashChildEnv, "1")
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 4))
	dir := t.TempDir()
	hit := map[string]int{}
	missing := func() []string {
		var out []string
		for _, p := range gcCrashPhases {
			if hit[p] == 0 {
				out = append(out, p)
			}
		}
		return out
	}
	var lastStep uint64
	for kill := 0; kill < *gcCrashKills || len(missing()) > 0 && kill < 3**gcCrashKills; kill++ {
		target := gcCrashPhases[kill%len(gcCrashPhases)]
		if kill >= *gcCrashKills {
			target = missing()[0]
		}
		delay := time.Duration(r.IntN(300)) * time.Microsecond
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
		wm := s.GCEpoch()
		require.LessOrEqual(t, wm, s.CommittedEpoch())
		if wm > 0 {
			_, err := s.Pin(wm - 1)
			require.True(t, errors.Is(err, ErrEpochUnavailable), "a pin below the watermark: %v", err)
		}
		e := wm + uint64(r.Int64N(int64(s.CommittedEpoch()-wm)+1))
		checkCrashEpoch(t, s, seed, e)
		require.NoError(t, s.Close())
	}
	t.Logf("kills per phase: %v; last committed step %d", hit, lastStep)
	for _, p := range gcCrashPhases {
		require.Positive(t, hit[p], "no kill landed in phase %q (hits %v)", p, hit)
	}

	s, err := crashOpen(dir)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	_, err = s.GC(context.Background(), GCRequest{Table: crashTable})
	require.NoError(t, err)
	require.NoError(t, s.CompactRange(context.Background(), crashTable, 0, 0))
	requireEntriesEqualLive(t, s, newCrashGen(seed).def)
	k, err := committedStep(s)
	require.NoError(t, err)
	checkCrashState(t, s, seed, k)
}

// checkCrashEpoch compares the crash table's rows at epoch with the
// workload replayed to the step that the progress table says was committed
// at that epoch.
func checkCrashEpoch(t *testing.T, s *Store, seed, epoch uint64) {
	sn, err := s.Pin(epoch)
	require.NoError(t, err)
	defer sn.Close()
	var step uint64
	row, ok, err := sn.Get(progressTable, 0, keys.AppendUint64(nil, 0))
	require.NoError(t, err)
	if ok {
		step = binary.BigEndian.Uint64(row)
	}
	g := newCrashGen(seed)
	for i := uint64(1); i <= step; i++ {
		g.step(i)
	}
	got := map[uint64]string{}
	for pk, row := range readSnap(t, sn, g.def) {
		got[pk] = row
	}
	require.Equal(t, g.state, got, "rows at epoch %d (step %d, watermark %d)", epoch, step, s.GCEpoch())
}
