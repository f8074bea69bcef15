package lsm

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/testutil"
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

// gcCrashChild runs the crash workload with GC until killed; it returns
// only on an error. Besides the lines of crashChild it prints
// "P gc-scanning", "P gc-ingesting" and "P gc-compacting" from the store's
// phase hook.
func gcCrashChild(dir string, seed uint64) error {
	s, g, k, err := openCrashChild(dir, seed)
	if err != nil {
		return err
	}
	w, err := s.NewWriter(crashTable, nil, nil)
	if err != nil {
		return err
	}
	wp, err := s.NewWriter(progressTable, nil, nil)
	if err != nil {
		return err
	}
	epoch := s.EpochFloor()
	r := childRand(seed, k)
	var pin *Snapshot
	ctx := context.Background()
	for step := k + 1; ; step++ {
		epoch += 1 + uint64(r.IntN(3))
		crashSay("P buffering")
		if err := g.write(step, epoch, func(uint16) *Writer { return w }, wp); err != nil {
			return err
		}
		for _, w := range []*Writer{w, wp} {
			if err := w.Seal(epoch); err != nil {
				return err
			}
		}
		if err := s.Commit(epoch); err != nil {
			return err
		}
		crashSay("C %d", step)
		// Hold a pin now and then, so that some passes collect below the
		// committed epoch.
		switch {
		case pin == nil && r.IntN(3) == 0:
			if pin, err = s.Snapshot(); err != nil {
				return err
			}
		case pin != nil && r.IntN(3) == 0:
			pin.Close()
			pin = nil
		}
		lo := r.IntN(g.def.VnodeCount)
		hi := lo + 1 + r.IntN(g.def.VnodeCount-lo)
		res, err := s.GC(ctx, GCRequest{Table: crashTable, VnodeLo: lo, VnodeHi: hi, BatchSize: 16 + r.IntN(112)})
		if err != nil {
			return err
		}
		crashSay("G %d %d", res.SafeEpoch, res.Deleted)
		if r.IntN(3) == 0 {
			if err := s.CompactRange(ctx, crashTable, lo, hi); err != nil {
				return err
			}
		}
		crashSay("P idle")
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
	missing := func() []string { return testutil.Missing(gcCrashPhases, hit) }
	var lastStep uint64
	for kill := 0; kill < *gcCrashKills || len(missing()) > 0 && kill < 3**gcCrashKills; kill++ {
		target := gcCrashPhases[kill%len(gcCrashPhases)]
		if kill >= *gcCrashKills {
			target = missing()[0]
		}
		delay := time.Duration(r.IntN(300)) * time.Microsecond
		phase, printed := runCrashChild(t, dir, seed, target, delay)
		hit[phase]++

		s, k := reopenAfterCrash(t, dir, seed, printed, lastStep, fmt.Sprintf("kill %d", kill))
		lastStep = k
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
	g := newCrashGenAt(seed, step)
	got := map[uint64]string{}
	for pk, row := range readSnap(t, sn, g.def) {
		got[pk] = row
	}
	require.Equal(t, g.state, got, "rows at epoch %d (step %d, watermark %d)", epoch, step, s.GCEpoch())
}
