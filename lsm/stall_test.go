package lsm

import (
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestCommitStallOnlyWhileCompactionsDrain: the L0 wait holds commits only
// while compactions can drain L0. With automatic compactions off, L0 grows
// past the limit and no commit waits. With every compaction output failing
// to be created, the first stalled commit waits until a second passes with
// no compaction running, then goes on; the later ones, with still no
// compaction run since, go on at once. Every such stall is counted as
// abandoned, and the one that waited is logged. (Before, each such commit
// waited 30 s.)
func TestCommitStallOnlyWhileCompactionsDrain(t *testing.T) {
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	t.Run("compactions-off", func(t *testing.T) {
		s, err := Open(t.TempDir(), &Options{
			Logger: QuietLogger{}, L0StopSublevels: 2,
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
		s, err := Open(dir, &Options{FS: faults.fs(), Logger: log, L0StopSublevels: 2,
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
		require.Contains(t, log.text(), "no compaction ran for 1s")
		require.Positive(t, faults.total(), "compaction outputs failed")
		faults.disarm()
	})
}
