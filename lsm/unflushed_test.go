package lsm

import (
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/stretchr/testify/require"
)

// physicalVnodes is every vnode's physical counts of a table that add up
// across files: not the prefixes and head puts (a pk in two files counts in
// each, as in two SSTs), nor the value bytes (apportioned per file, so
// they round differently).
func physicalVnodes(v stats.Version, def TableDef) map[uint16]stats.Counts {
	out := map[uint16]stats.Counts{}
	for vn := range def.VnodeCount {
		c := v.Vnode(def.ID, uint16(vn))
		out[uint16(vn)] = stats.Counts{Entries: c.Entries, Puts: c.Puts, Deletes: c.Deletes, KeyBytes: c.KeyBytes, PebbleTombstones: c.PebbleTombstones}
	}
	return out
}

// TestUnflushedCheckpoints: checkpoints committed as batches count in the
// physical statistics from their Commit on, through their summaries, with
// the counts their flushed SST then reports; a flush replaces the
// summaries by the SST; after a crash, the reopened store flushes the
// checkpoints replayed from the WAL and counts each once.
func TestUnflushedCheckpoints(t *testing.T) {
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(io.Discard), MemoryWatermark: -1, Pebble: func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
	}}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 3)
	exact := func(s *Store, when string) stats.Snapshot {
		st := s.Stats()
		require.NoError(t, st.PhysicalErr, when)
		require.EqualValues(t, len(rawVersions(t, s, 1)), st.Physical.Table(1).TotalKeyCount, "%s: physical entries", when)
		require.EqualValues(t, len(c.live), st.Live.Table(1).Rows, when)
		return st
	}
	files := s.Stats().Physical.NumFiles()
	for i := range 6 {
		c.step(300, 30, 10)
		st := exact(s, fmt.Sprintf("commit %d", i))
		require.Len(t, ssttracker.Unflushed(statsinternal.VersionOf(st.Physical)), 2*(i+1), "commit %d: a part for the table, one for the metadata", i)
		require.Equal(t, files, st.Physical.NumFiles(), "commit %d wrote no SST", i)
	}
	before := physicalVnodes(s.Stats().Physical, def)

	rep, err := s.Verify() // flushes
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	st := exact(s, "flushed")
	require.Empty(t, ssttracker.Unflushed(statsinternal.VersionOf(st.Physical)))
	require.Equal(t, before, physicalVnodes(st.Physical, def), "the flushed SST's counts are the summaries'")
	require.LessOrEqual(t, st.Physical.NumFiles(), files+2, "six checkpoints, one flush: an SST of the table and one of metadata")

	// Checkpoints in the WAL only at a crash.
	for range 3 {
		c.step(300, 30, 10)
	}
	want, wantLive := len(rawVersions(t, s, 1)), len(c.live)
	crashForTest(s)
	s, err = Open(dir, opts)
	require.NoError(t, err)
	defer s.Close()
	st = s.Stats()
	require.NoError(t, st.PhysicalErr)
	require.Empty(t, ssttracker.Unflushed(statsinternal.VersionOf(st.Physical)), "Open flushed what the WAL replayed")
	require.EqualValues(t, want, st.Physical.Table(1).TotalKeyCount)
	require.EqualValues(t, wantLive, st.Live.Table(1).Rows)
	rep, err = s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
}

// TestFaultsFlush: every SST Pebble writes fails, so the flush of the
// checkpoints committed as batches fails (and Pebble retries it). The
// checkpoints stand (they are in the WAL), reads and statistics stay
// exact through their summaries, Verify says it could not flush instead of
// hanging or reporting differences, and Close gives up its flush after a
// bound; once the fault is gone, the flush lands and the summaries give way
// to its SST.
func TestFaultsFlush(t *testing.T) {
	fs := newFaultStore(t, 1, Options{MemoryWatermark: -1, L0StopSublevels: -1})
	commit := func() {
		fs.epoch++
		for i := range 40 {
			pk := fs.epoch*100 + uint64(i)
			k := keys.AppendUint64(nil, pk)
			row := fmt.Sprintf("row-%d", pk)
			require.NoError(t, fs.w.Insert(fs.epoch, fs.def.VnodeOf(k), k, []byte(row)))
			fs.committed[pk] = row
		}
		require.NoError(t, fs.w.Seal(fs.epoch))
		require.NoError(t, fs.s.Commit(fs.epoch))
	}
	fs.f.arm("create|write|sync", `^db/\d+\.sst$`, 0, 0, 0)
	for range 3 {
		commit()
	}
	_, err := fs.s.Verify()
	require.Error(t, err, "Verify cannot flush")
	require.True(t, isInjected(err), "%v", err)
	st := fs.s.Stats()
	require.NoError(t, st.PhysicalErr)
	require.NotEmpty(t, ssttracker.Unflushed(statsinternal.VersionOf(st.Physical)))
	require.EqualValues(t, len(fs.committed), st.Physical.Table(fs.def.ID).TotalKeyCount)
	require.Equal(t, fs.committed, readSnapOf(t, fs.s, fs.def))

	fs.f.disarm()
	require.Eventually(t, func() bool { return len(ssttracker.Unflushed(statsinternal.VersionOf(fs.s.Stats().Physical))) == 0 },
		10*time.Second, 5*time.Millisecond, "Pebble's retried flush lands")
	fs.check("after the fault")
	st = fs.s.Stats()
	require.EqualValues(t, len(fs.committed), st.Physical.Table(fs.def.ID).TotalKeyCount)

	// Close while flushes fail: it logs and closes; the reopened store
	// has every checkpoint (from the WAL).
	commit()
	fs.f.arm("create|write|sync", `^db/\d+\.sst$`, 0, 0, 0)
	start := time.Now()
	require.NoError(t, fs.s.Close())
	require.Less(t, time.Since(start), flushLimit+5*time.Second)
	fs.s = nil
	fs.open()
	fs.check("reopened")
	require.Empty(t, ssttracker.Unflushed(statsinternal.VersionOf(fs.s.Stats().Physical)))
}

// TestLargeBatchCheckpoint: a checkpoint whose batch Pebble takes as a
// large batch (a memtable of its own, flushed at once; Pebble drops the
// batch's contents and sequence number at its commit) counts in the
// physical statistics when Commit returns, through that flush's SST, and
// the small checkpoints around it through their summaries.
func TestLargeBatchCheckpoint(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{
		Logger: QuietLogger(io.Discard), MemoryWatermark: -1, CommitBatchBytes: 1 << 40,
		Pebble: func(o *pebble.Options) { o.MemTableSize = 1 << 20 },
	})
	require.NoError(t, err)
	defer s.Close()
	def := TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 5)
	for i, rows := range []int{100, 20000, 100, 20000, 100} {
		c.step(rows, 20, 5)
		st := s.Stats()
		require.NoError(t, st.PhysicalErr)
		require.EqualValues(t, len(rawVersions(t, s, 1)), st.Physical.Table(1).TotalKeyCount, "commit %d of %d rows: physical entries", i, rows)
		require.EqualValues(t, len(c.live), st.Live.Table(1).Rows, "commit %d", i)
	}
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
}
