package lsm

import (
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestBusyClock: overlapping flushes and compactions count once, a running
// one counts up to the read, and an end without a begin is ignored.
func TestBusyClock(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var c backgroundWork
	c.end(at(0)) // no begin: ignored
	busy, running := c.read(at(5))
	require.Zero(t, busy)
	require.Zero(t, running)

	c.begin(at(10)) // a flush, 10–50
	c.begin(at(30)) // a compaction, 30–80: overlaps
	busy, running = c.read(at(40))
	require.Equal(t, 30*time.Millisecond, busy, "running since 10")
	require.Equal(t, 2, running)
	c.end(at(50))
	c.end(at(80))
	busy, running = c.read(at(200))
	require.Equal(t, 70*time.Millisecond, busy, "10–80 once")
	require.Zero(t, running)

	c.begin(at(300))
	busy, _ = c.read(at(310))
	require.Equal(t, 80*time.Millisecond, busy)
	c.end(at(320))
	c.end(at(330)) // one end too many: ignored
	busy, running = c.read(at(400))
	require.Equal(t, 90*time.Millisecond, busy)
	require.Zero(t, running)
}

// TestBackgroundReplay: a store reopened on a WAL it had not flushed counts
// the replayed memtable as written, beside the busy time of its flush.
func TestBackgroundReplay(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for i := range uint64(1000) {
		pk := keys.AppendUint64(nil, i)
		require.NoError(t, w.Insert(1, def.VnodeOf(pk), pk, make([]byte, 100)))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1)) // a batch: in the WAL and the memtable only
	written, _ := s.Background()
	crashForTest(s)

	s, err = Open(dir, &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	replayed, busy := s.Background()
	// The memtable's measure is not the buffers': within a factor of two.
	require.Greater(t, replayed, written/2, "the replayed WAL")
	require.Less(t, replayed, 2*written, "the replayed WAL")
	require.Positive(t, busy, "its flush")
}
