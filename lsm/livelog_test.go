package lsm

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/klauspost/compress/zstd"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// logStore writes a store whose live statistics have log rows (format 3,
// docs/format.md): a load, then checkpoints that update and delete rows
// without moving any bucket's bounds, which the store persists as log
// rows. It returns the store's directory and the log rows' keys.
func logStore(t *testing.T) (string, [][]byte) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, &Options{Logger: QuietLogger(io.Discard)})
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	row := func(i, e uint64) []byte { return []byte(fmt.Sprintf("row %d at epoch %d", i, e)) }
	for i := range uint64(2000) {
		pk := keys.AppendUint64(nil, i*7919%100003)
		require.NoError(t, w.Insert(1, def.VnodeOf(pk), pk, row(i, 1)))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	for e := uint64(2); e <= 4; e++ {
		for i := e; i < 2000; i += 97 {
			pk := keys.AppendUint64(nil, i*7919%100003)
			if e == 3 {
				require.NoError(t, w.Delete(e, def.VnodeOf(pk), pk, row(i, 1)))
				continue
			}
			require.NoError(t, w.Update(e, def.VnodeOf(pk), pk, row(i, 1), append(row(i, e), " and more"...)))
		}
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
	}
	require.NoError(t, w.Close())
	logs := liveLogKeys(t, s.db)
	require.NoError(t, s.Close())
	return dir, logs
}

// liveLogKeys returns the keys of the live statistics' log rows in db.
func liveLogKeys(t *testing.T, db *pebble.DB) [][]byte {
	t.Helper()
	lo := keys.MetaKey([]byte(keys.LiveLogPrefix))
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: keys.MetaKey([]byte("live_log0"))})
	require.NoError(t, err)
	var out [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, bytes.Clone(it.Key()))
	}
	require.NoError(t, it.Close())
	return out
}

// TestLiveLogReopen: a store whose live statistics are partly in log rows
// reopens with the same statistics, which Verify finds exact, and Verify
// checks the rows against the statistics in memory.
func TestLiveLogReopen(t *testing.T) {
	dir, logs := logStore(t)
	require.NotEmpty(t, logs, "the checkpoints that moved no bounds wrote log rows")
	s, err := Open(dir, &Options{Logger: QuietLogger(io.Discard)})
	require.NoError(t, err)
	defer s.Close()
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, 2000-21, s.Stats().Live.Table(1).Rows)

	// A log row lost while the store runs: the rows no longer hold the
	// statistics in memory, and Verify says which vnodes differ.
	require.NoError(t, s.db.Delete(logs[len(logs)-1], pebble.Sync))
	rep, err = s.Verify()
	require.NoError(t, err)
	require.False(t, rep.OK())
	require.Contains(t, strings.Join(rep.Differences, "\n"), "its metadata rows (bucket rows and log) hold")
	require.Empty(t, rep.Corrupt)

	// A damaged one: Verify names it among the corrupt rows.
	require.NoError(t, s.db.Set(logs[len(logs)-1], []byte{0, 0, 0, 1, 9}, pebble.Sync))
	rep, err = s.Verify()
	require.NoError(t, err)
	require.Len(t, rep.Corrupt, 1, "%+v", rep)
	require.Contains(t, rep.Corrupt[0], fmt.Sprintf("%x", logs[len(logs)-1]))
}

// TestLiveLogCorrupt damages a log row every way (cut at every length,
// a bit of every byte flipped, rows of unknown tables, vnodes, buckets,
// flags, plain and compressed; unknown codecs, frames that are not zstd or
// would decode to more than the format allows):
// a writable Open fails with a corruption error naming the row, or opens
// (a flipped count or position still decodes); a read-only Open leaves a
// row it cannot apply out and Verify names it. Nothing panics.
func TestLiveLogCorrupt(t *testing.T) {
	base, logs := logStore(t)
	require.NotEmpty(t, logs)
	key := logs[len(logs)-1]
	db, err := pebble.Open(base+"/"+pebbleDir, &pebble.Options{Comparer: keys.Comparer, Logger: QuietLogger(nil)})
	require.NoError(t, err)
	good, closer, err := db.Get(key)
	require.NoError(t, err)
	good = bytes.Clone(good)
	require.NoError(t, closer.Close())
	require.NoError(t, db.Close())

	var values [][]byte
	for n := range len(good) {
		values = append(values, good[:n])
	}
	for i := range good {
		v := bytes.Clone(good)
		v[i] ^= []byte{0x01, 0x80}[i%2]
		values = append(values, v)
	}
	layouts := [][]byte{
		{0, 0, 0, 9, 1, 0, 0, 0, 0},                      // unknown table
		{0, 0, 0, 1, 1, 0, 7, 0, 0},                      // vnode past the table's
		{0, 0, 0, 1, 9, 0, 0, 0, 0},                      // more vnodes than the table has
		{0, 0, 0, 1, 1, 0, 0, 0x20, 0},                   // unknown anchor flag
		{0, 0, 0, 1, 1, 0, 0, 0, 1, 0xfe, 0x3f, 0, 0, 0}, // bucket far past the vnode's
		{0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0xff},    // unknown bucket flags
		{0, 0, 0, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0},          // vnodes out of order
	}
	enc, err := zstd.NewWriter(nil, zstd.WithSingleSegment(true))
	require.NoError(t, err)
	values = append(values, append(bytes.Clone(good), 0)) // trailing bytes
	for _, l := range layouts {
		values = append(values, append([]byte{0}, l...), enc.EncodeAll(l, []byte{1})) // plain and compressed
	}
	values = append(values,
		nil,                                  // no codec
		[]byte{2, 0, 0, 0, 1, 1, 0, 0, 0, 0}, // unknown codec
		[]byte{1},                            // no zstd frame
		[]byte{1, 0, 0, 0, 1, 1, 0, 0, 0, 0}, // not a zstd frame
		enc.EncodeAll(make([]byte, 1<<20), []byte{1}), // a frame that says it decodes to more than 64 times its bytes
	)
	plainFrame, err := zstd.NewWriter(nil, zstd.WithSingleSegment(false))
	require.NoError(t, err)
	values = append(values, plainFrame.EncodeAll(layouts[0], []byte{1})) // a frame without its content size
	refused, opened := 0, 0
	for i, v := range values {
		dir := t.TempDir()
		require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
		db, err := pebble.Open(dir+"/"+pebbleDir, &pebble.Options{Comparer: keys.Comparer, Logger: QuietLogger(nil)})
		require.NoError(t, err)
		require.NoError(t, db.Set(key, v, pebble.Sync))
		require.NoError(t, db.Close())

		s, err := Open(dir, &Options{Logger: QuietLogger(io.Discard)})
		if err == nil {
			// The row decodes and applies (a changed count, which Verify
			// finds, or a changed position sum, which only moves estimates).
			opened++
			_, err := s.Verify()
			require.NoError(t, err)
			require.NoError(t, s.Close())
			continue
		}
		refused++
		require.True(t, errors.Is(err, lsmstats.ErrCorruption), "value %d %x: %v", i, v, err)
		require.Contains(t, err.Error(), fmt.Sprintf("%x", key), "value %d %x", i, v)
		ro, err := Open(dir, &Options{ReadOnly: true, Logger: QuietLogger(io.Discard)})
		require.NoError(t, err, "value %d %x", i, v)
		rep, err := ro.Verify()
		require.NoError(t, err)
		require.False(t, rep.OK())
		require.Contains(t, strings.Join(rep.Corrupt, "\n"), fmt.Sprintf("%x", key), "value %d %x", i, v)
		require.NoError(t, ro.Close())
	}
	t.Logf("%d damaged log rows: %d refused, %d opened", len(values), refused, opened)
	require.Positive(t, refused)
}

// TestLiveLogRollingFold fills an MV as a backfill does (a row or two
// appended to every vnode at each checkpoint, with coarse buckets so that
// the log soon outweighs their rewrite) and checks that the log's fold is
// spread over checkpoints: log rows go at many commits, a few at a time
// (a checkpoint this small folds a sixteenth of the buckets, or twice its
// rows), and a store abandoned right after such a commit (its last
// checkpoints in the WAL alone) reopens with the same statistics, which
// Verify finds exact.
func TestLiveLogRollingFold(t *testing.T) {
	dir := t.TempDir()
	opts := func() *Options { return &Options{Logger: QuietLogger(io.Discard), StatsBucketBudget: 64} }
	s, err := Open(dir, opts())
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 32, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	next := make([]uint64, def.VnodeCount)
	var deleting, partial, reopens int
	last := 0
	for e := uint64(1); e <= 600; e++ {
		for vn := range uint16(def.VnodeCount) {
			for range 1 + e%2 {
				next[vn]++
				// Each vnode's pks ascend: the vnode is the pk's low bits.
				pk := keys.AppendUint64(nil, next[vn]<<8|uint64(vn))
				require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, []byte("a row of the MV")))
			}
		}
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
		logs := len(liveLogKeys(t, s.db))
		if logs < last {
			deleting++
			if logs > 0 {
				partial++ // some rows went, not all
			}
			if deleting%8 == 1 {
				// Abandon the store: its unflushed checkpoints are in the
				// WAL alone, the fold's deletes among them.
				want := s.Stats().Live.Table(1)
				require.NoError(t, w.Close())
				crashForTest(s)
				s, err = Open(dir, opts())
				require.NoError(t, err)
				reopens++
				require.Equal(t, want, s.Stats().Live.Table(1), "after commit %d", e)
				rep, err := s.Verify()
				require.NoError(t, err)
				require.True(t, rep.OK(), "after commit %d: %+v", e, rep)
				w, err = s.NewWriter(1, nil, nil)
				require.NoError(t, err)
			}
		}
		last = logs
	}
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	t.Logf("log rows deleted at %d commits of 600, some of them at %d; %d reopens", deleting, partial, reopens)
	require.Greater(t, partial, 10, "the fold is spread over commits")
	require.Positive(t, reopens)
}
