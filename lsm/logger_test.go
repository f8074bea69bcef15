package lsm

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// quietFatalChildEnv makes the test binary call QuietLogger's Fatalf, as
// Pebble does on a failed MANIFEST sync (TestMain).
const quietFatalChildEnv = "LSMSTATS_LSM_QUIET_FATAL_CHILD"

func quietFatalChild() {
	QuietLogger(os.Stdout).Fatalf("MANIFEST sync failed: %s\n", "injected")
	fmt.Println("Fatalf returned")
	os.Exit(0)
}

// TestQuietLogger: informational lines are dropped, errors are written one
// line each, and Fatalf ends the process with status 1 after its line.
func TestQuietLogger(t *testing.T) {
	var buf bytes.Buffer
	l := QuietLogger(&buf)
	l.Infof("flushed %d memtables", 2)
	l.Errorf("lsmstats: corrupt data in %s", "000012.sst")
	l.Errorf("two\n")
	require.Equal(t, "lsmstats: corrupt data in 000012.sst\ntwo\n", buf.String())

	// Many goroutines log at once (Pebble's do): each line stays whole.
	buf.Reset()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				l.Errorf("goroutine %d line %d", g, i)
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 800)
	for _, line := range lines {
		require.Regexp(t, `^goroutine \d line \d+$`, line)
	}

	c := testutil.StartChild(t, os.Stderr, quietFatalChildEnv+"=1")
	var out []string
	c.ReadUntil(time.Minute, func(line string) bool { out = append(out, line); return false })
	exit := c.Wait()
	require.NoError(t, exit.WaitErr())
	require.Equal(t, 1, exit.Code, "Fatalf's exit status")
	require.Equal(t, []string{"fatal: MANIFEST sync failed: injected"}, out)
}

// lineLogger keeps every line it gets.
type lineLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *lineLogger) Infof(format string, args ...any)  { l.add(format, args...) }
func (l *lineLogger) Errorf(format string, args ...any) { l.add(format, args...) }
func (l *lineLogger) Fatalf(format string, args ...any) { l.add(format, args...); panic("fatal") }

func (l *lineLogger) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *lineLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// TestLoggerWinsOverPebbleHook: Options.Logger gets Pebble's lines and the
// store's even when the Pebble hook sets a logger of its own, in Open and
// in PebbleOptions; nil means Pebble's default logger.
func TestLoggerWinsOverPebbleHook(t *testing.T) {
	mine, hooks := &lineLogger{}, &lineLogger{}
	opts := &Options{Logger: mine, CommitBatchBytes: -1, Pebble: func(o *pebble.Options) { o.Logger = hooks }}
	require.Same(t, mine, opts.PebbleOptions().Logger.(*lineLogger))
	require.Equal(t, pebble.DefaultLogger, (&Options{}).PebbleOptions().Logger, "nil: Pebble's default")
	require.Equal(t, pebble.DefaultLogger, (*Options)(nil).PebbleOptions().Logger)

	dir := t.TempDir()
	s, err := Open(dir, opts)
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for i := range uint64(100) {
		pk := keys.AppendUint64(nil, i)
		require.NoError(t, w.Insert(1, def.VnodeOf(pk), pk, []byte("row")))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	// A catalog row that does not decode, for the store's own line below.
	require.NoError(t, s.db.Set(keys.CatalogKey(1), []byte{9}, pebble.Sync))
	require.NoError(t, s.Close())
	require.Contains(t, mine.text(), "WAL", "Pebble's lines (its open's)")
	require.Empty(t, hooks.text(), "the hook's logger got lines")

	// The store's own line: a read-only open leaves out the corrupt
	// catalog row and logs it (Errorf).
	mine.lines = nil
	ro, err := Open(dir, &Options{ReadOnly: true, Logger: mine, Pebble: func(o *pebble.Options) { o.Logger = hooks }})
	require.NoError(t, err)
	require.NoError(t, ro.Close())
	require.Contains(t, mine.text(), "left out (read-only)", "the store's own line")
	require.Empty(t, hooks.text(), "the hook's logger got lines")
}
