package lsm

import (
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestCommitStallOnlyWhileCompactionsDrain: the L0 wait holds commits only
// while compactions can drain L0. With automatic compactions off, L0 grows
// past the limit and no commit waits. With every compaction output failing
// to be created, the first stalled commit waits until a compaction fails
// during its wait or a second passes with none running, whichever comes
// first (Pebble's timing decides), then goes on; the later ones, with still
// no compaction run since, go on at once. Every such stall is counted as
// abandoned, and the one that waited is logged. (Before, each such commit
// waited 30 s.)
func TestCommitStallOnlyWhileCompactionsDrain(t *testing.T) {
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	t.Run("compactions-off", func(t *testing.T) {
		s, err := Open(t.TempDir(), &Options{
			Logger: QuietLogger(nil), L0StopSublevels: 2, CommitBatchBytes: -1,
			Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true },
		})
		require.NoError(t, err)
		defer s.Close()
		c := newChurn(t, s, def, 1)
		for range 6 {
			c.step(200, 80, 0) // updates all over the keyspace: overlapping L0 files
		}
		m := s.Metrics()
		require.GreaterOrEqual(t, m.L0Sublevels, 2, "L0 must be past the limit")
		require.Zero(t, m.CommitStalls)
	})
	t.Run("compactions-failing", func(t *testing.T) {
		dir := t.TempDir()
		// Compaction outputs are the SSTs Pebble creates in db/; ingested
		// ones are linked there from staging/.
		faults := newFaultInjector(dir, 1)
		log := &recordingLogger{}
		// Pebble compacts L0 from 2 sublevels here (the store's default is
		// 16), so that compactions are tried, and fail, before L0 is deep.
		s, err := Open(dir, &Options{FS: faults.fs(), Logger: log, L0StopSublevels: 2, CommitBatchBytes: -1,
			Pebble: func(o *pebble.Options) { o.L0CompactionThreshold = 2 }})
		require.NoError(t, err)
		defer s.Close()
		c := newChurn(t, s, def, 2)
		c.step(200, 0, 0)
		faults.arm("create", `^db/\d+\.sst$`, 0, 0, 0)
		for range 6 {
			c.step(200, 80, 0)
		}
		m := s.Metrics()
		require.GreaterOrEqual(t, m.CommitStalls, int64(2), "L0 must reach the limit")
		require.Equal(t, m.CommitStalls, m.CommitStallsAbandoned, "no wait can end with L0 drained")
		require.Equal(t, 1, strings.Count(log.text(), "committing anyway"), "only the first stall waited:\n%s", log.text())
		text := log.text()
		require.True(t, strings.Contains(text, "no compaction ran for 1s") || strings.Contains(text, "compactions are failing"),
			"the wait ends on a failed compaction or an idle second:\n%s", text)
		require.NotContains(t, text, "L0StallLimit", "the wait must not run to its limit")
		require.Positive(t, faults.total(), "compaction outputs failed")
		faults.disarm()
	})
}

// slowCompactionFS delays the creation of Pebble's compaction outputs (the
// SSTs created in db/; ingested ones are linked there) while armed.
type slowCompactionFS struct {
	vfs.FS
	delay atomic.Int64 // nanoseconds; 0: none
}

func (fs *slowCompactionFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	if d := fs.delay.Load(); d > 0 && strings.HasSuffix(name, ".sst") && filepath.Base(filepath.Dir(name)) == pebbleDir {
		time.Sleep(time.Duration(d))
	}
	return fs.FS.Create(name, category)
}

// TestCommitStallBounded: while compactions run but do not drain L0 (here:
// each output takes 2 s to create; after a failed compaction Pebble leaves
// its inputs alone for 30 s while others may run), a commit waits for L0 at
// most Options.L0StallLimit — not until L0 drains, and not L0IdleLimit,
// since compactions are running — then goes on and logs why.
func TestCommitStallBounded(t *testing.T) {
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	fs := &slowCompactionFS{FS: vfs.Default}
	log := &recordingLogger{}
	const limit = 300 * time.Millisecond
	s, err := Open(t.TempDir(), &Options{FS: fs, Logger: log, L0StopSublevels: 2, CommitBatchBytes: -1,
		L0StallLimit: limit, L0IdleLimit: time.Minute})
	require.NoError(t, err)
	defer s.Close()
	defer fs.delay.Store(0) // Close waits for running compactions
	c := newChurn(t, s, def, 3)
	c.step(200, 0, 0)
	fs.delay.Store(int64(2 * time.Second))
	for range 6 {
		c.step(200, 80, 0)
	}
	m := s.Metrics()
	require.Positive(t, m.CommitStalls, "L0 must reach the limit")
	require.Positive(t, m.CommitStallsAbandoned)
	require.Contains(t, log.text(), "still after 300ms (Options.L0StallLimit)")
	require.NotContains(t, log.text(), "no compaction ran", "compactions were running")
	// Each stall waited about the limit (a sleep of at most 50 ms past it),
	// never the 2 s a compaction took; stalls that found no compaction
	// succeeded since the last gave up did not wait at all.
	require.Less(t, m.CommitStallTime, time.Duration(m.CommitStalls)*(limit+time.Second),
		"%d stalls waited %s", m.CommitStalls, m.CommitStallTime)
}
