package lsm

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// stallLogger keeps the store's log lines.
type stallLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *stallLogger) Infof(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, errors.Newf(format, args...).Error())
}
func (l *stallLogger) Errorf(format string, args ...any) { l.Infof(format, args...) }
func (l *stallLogger) Fatalf(format string, args ...any) { panic(errors.Newf(format, args...)) }

func (l *stallLogger) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// TestCommitStallOnlyWhileCompactionsDrain: the L0 wait holds commits only
// while compactions can drain L0. With automatic compactions off, L0 grows
// past the limit and no commit waits; with every compaction output failing
// to be created, commits wait — until a compaction fails or a second passes
// with none running — then go on, counting the abandoned waits. (Before,
// each such commit waited 30 s.)
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
		var failing atomic.Bool
		staging := vfs.Default.PathJoin(dir, stagingDir)
		// Compaction outputs are the SSTs Pebble creates in the store's
		// directory; ingested ones are linked from staging.
		inj := errorfs.Any(errorfs.InjectorFunc(func(op errorfs.Op) error {
			if op.Kind == errorfs.OpCreate && strings.HasSuffix(op.Path, ".sst") &&
				!strings.HasPrefix(op.Path, staging) && failing.Load() {
				return errorfs.ErrInjected
			}
			return nil
		}))
		log := &stallLogger{}
		s, err := Open(dir, &Options{FS: errorfs.Wrap(vfs.Default, inj), Logger: log, L0StopSublevels: 2})
		require.NoError(t, err)
		defer s.Close()
		c := newChurn(t, s, def, 2)
		c.step(200, 0, 0)
		failing.Store(true)
		for range 4 {
			c.step(200, 80, 0)
		}
		m := s.Metrics()
		require.Positive(t, m.CommitStalls, "L0 must reach the limit")
		require.Equal(t, m.CommitStalls, m.CommitStallsAbandoned, "no wait can end with L0 drained")
		require.True(t, log.contains("committing anyway"), "the abandoned wait is logged")
		failing.Store(false)
	})
}
