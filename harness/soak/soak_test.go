package soak

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/stretchr/testify/require"
)

var (
	soakFor  = flag.Duration("soak-for", 20*time.Second, "how long TestSoak runs (make soak: 10m)")
	soakSeed = flag.Uint64("soak-seed", 0, "seed of TestSoak (0: testutil.DefaultSeed, or time based with -random-seeds)")
	soakDir  = flag.String("soak-dir", "", "store directory of TestSoak (default: a temporary directory)")
)

func TestMain(m *testing.M) {
	if tk := os.Getenv(WorkerEnv); tk != "" {
		os.Exit(Worker(tk))
	}
	os.Exit(m.Run())
}

// TestSoak runs backfill jobs with SIGKILLs, injected faults, cancels and
// reopens with rescale for -soak-for, checking after every event, and
// fails on any finding. It logs the events per kind. make test runs it for
// 20 s (every kind of event comes up: the first runs go through them);
// make soak for 10 minutes.
func TestSoak(t *testing.T) {
	seed := testutil.Seed(t, "soak-seed", *soakSeed)
	dir := *soakDir
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "store")
	}
	rep := Run(t, Config{Dir: dir, For: *soakFor, Seed: seed, Logf: t.Logf})
	t.Logf("soak (seed %d):\n%s", seed, rep.Summary())
	require.Empty(t, rep.Findings, "findings (seed %d):\n%s", seed, rep.Summary())
	for _, k := range eventKinds {
		n := 0
		for kind, c := range rep.Events {
			if kind == k || len(kind) > len(k) && kind[:len(k)+1] == k+":" {
				n += c
			}
		}
		require.Positive(t, n, "no %s event ran", k)
	}
	require.Positive(t, rep.Checks)
}

// TestOurStacks: a hung worker's goroutine dump is cut down to the stacks
// that name this module, which is what a hang finding shows.
func TestOurStacks(t *testing.T) {
	dump := "SIGQUIT: quit\nPC=0x1 m=0 sigcode=0\n\n" +
		"goroutine 1 [select]:\ngithub.com/lsmstats/lsmstats/lsm.(*Store).flushMemtable(...)\n\t/x/lsm/store.go:817\n\n" +
		"goroutine 7 [chan receive]:\ngithub.com/cockroachdb/pebble/v2.(*DB).flush(...)\n\t/y/compaction.go:1482\n\n" +
		"goroutine 9 [semacquire]:\nsync.(*Mutex).Lock(...)\ngithub.com/lsmstats/lsmstats/backfill.(*Job).step1(...)\n\t/x/backfill/job.go:1\n\n" +
		"rax    0x0\n"
	got := ourStacks(dump)
	require.Contains(t, got, "goroutine 1 [select]")
	require.Contains(t, got, "goroutine 9 [semacquire]")
	require.NotContains(t, got, "goroutine 7")
	require.NotContains(t, got, "rax")
	require.Equal(t, tail("no stacks here"), ourStacks("no stacks here"))
}
