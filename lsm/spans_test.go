package lsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// TestSSTSpans checks that Pebble's flushes and compactions cut their SSTs
// where a table ends, and where one of its vnode partitions ends once the
// table's live bytes reach PartitionBytes (sstSpans): checkpoints of a
// large and a small table committed as batches share memtables; every SST
// of the flushes and of a compaction of the whole key space holds keys of
// one table only, the large table's of one partition only, and the small
// table's span its partitions. With every checkpoint ingested, the store's
// own SSTs (output.cut) do the same. A reopened store decides again from
// its live statistics.
func TestSSTSpans(t *testing.T) {
	t.Run("batches", func(t *testing.T) { testSSTSpans(t, 0) })
	t.Run("ingested", func(t *testing.T) { testSSTSpans(t, -1) })
}

func testSSTSpans(t *testing.T, commitBatchBytes int64) {
	dir := t.TempDir()
	opts := &Options{Logger: QuietLogger(io.Discard), CommitBatchBytes: commitBatchBytes, PartitionBytes: 16 << 10,
		Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }}
	s, err := Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	const large, small = 1, 2
	var ws []*Writer
	def := TableDef{VnodeCount: 32, PK: keys.Schema{keys.Uint64}}
	for _, id := range []uint32{large, small} {
		def.ID = id
		require.NoError(t, s.CreateTable(def))
		w, err := s.NewWriter(id, nil, nil)
		require.NoError(t, err)
		ws = append(ws, w)
	}
	// Epoch 1 takes the large table past PartitionBytes with one row (an
	// SST of one key lies in one partition, cut or not): the store
	// partitions it when the checkpoint is published. The small table
	// stays below: 1 + 3·20 rows of about 30 bytes.
	pk := keys.AppendUint64(nil, 0)
	require.NoError(t, ws[0].Insert(1, def.VnodeOf(pk), pk, bytes.Repeat([]byte{'x'}, 16<<10)))
	require.NoError(t, ws[1].Insert(1, def.VnodeOf(pk), pk, []byte("first")))
	for _, w := range ws {
		require.NoError(t, w.Seal(1))
	}
	require.NoError(t, s.Commit(1))
	require.True(t, s.spans.partitioned(large))
	require.False(t, s.spans.partitioned(small))
	for e := uint64(2); e <= 4; e++ {
		for i, w := range ws {
			rows := map[int]uint64{0: 200, 1: 20}[i]
			for k := range rows {
				pk := keys.AppendUint64(nil, e*1000+k)
				require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, fmt.Appendf(nil, "row %d of table %d", k, i+1)))
			}
			require.NoError(t, w.Seal(e))
		}
		require.NoError(t, s.Commit(e))
	}
	for _, w := range ws {
		require.NoError(t, w.Close())
	}
	require.False(t, s.spans.partitioned(small), "small table: %d live bytes", s.mu.live.Current().Table(small).Bytes)

	// cut knows the small table's partitions, which the store does not use.
	var cut sstSpans
	cut.partition(small, def.VnodeCount)
	check := func(s *Store, what string) {
		levels, err := s.db.SSTables()
		require.NoError(t, err)
		largeFiles, smallSpread := 0, false
		for level, tables := range levels {
			for _, tbl := range tables {
				end := s.spans.end(tbl.Smallest.UserKey)
				require.True(t, within(tbl.Largest.UserKey, end), "%s: L%d SST %d spans %x to %x, past %x",
					what, level, tbl.FileNum, tbl.Smallest.UserKey, tbl.Largest.UserKey, end)
				id, _ := keys.TableOf(tbl.Smallest.UserKey)
				switch id {
				case large:
					largeFiles++
				case small:
					// Not cut at partitions: an SST of the small table's
					// 80 rows spans more than one.
					smallSpread = smallSpread || !within(tbl.Largest.UserKey, cut.end(tbl.Smallest.UserKey))
				}
			}
		}
		// The large table's 601 rows over its 16 partitions.
		require.GreaterOrEqual(t, largeFiles, 16, what)
		require.True(t, smallSpread, "%s: the small table's SSTs are cut at partitions", what)
	}
	require.NoError(t, s.db.Flush())
	check(s, "flush")
	require.NoError(t, s.db.Compact(t.Context(), []byte{0}, bytes.Repeat([]byte{0xff}, 8), true))
	check(s, "compaction")

	require.NoError(t, s.Close())
	s, err = Open(dir, opts)
	require.NoError(t, err)
	require.True(t, s.spans.partitioned(large), "after reopen")
	require.False(t, s.spans.partitioned(small), "after reopen")
}

func TestSSTSpanEnds(t *testing.T) {
	var p sstSpans
	p.partition(7, 256)
	p.partition(8, 100)
	p.partition(9, 4)
	p.partition(10, 1)
	vnode := keys.AppendVnodeBound
	table := func(id uint32) []byte { return keys.AppendTableBound(nil, id) }
	for _, tc := range []struct {
		spans      *sstSpans
		start, end []byte
	}{
		// 256 vnodes: partitions of 16.
		{&p, table(7), vnode(nil, 7, 16)},
		{&p, vnode(nil, 7, 15), vnode(nil, 7, 16)},
		{&p, vnode(nil, 7, 16), vnode(nil, 7, 32)},
		{&p, keys.AppendVersioned(nil, 7, 200, keys.AppendUint64(nil, 1), keys.MakeVersion(1, 0), keys.KindPut), vnode(nil, 7, 208)},
		{&p, vnode(nil, 7, 240), table(8)},
		// 100 vnodes: partition k starts at ceil(100k/16).
		{&p, vnode(nil, 8, 0), vnode(nil, 8, 7)},
		{&p, vnode(nil, 8, 6), vnode(nil, 8, 7)},
		{&p, vnode(nil, 8, 7), vnode(nil, 8, 13)},
		{&p, vnode(nil, 8, 94), table(9)},
		// A vnode out of the table's range, and a 5-byte key (its vnode
		// padded: 0x0100).
		{&p, vnode(nil, 8, 300), table(9)},
		{&p, append(table(9), 0), vnode(nil, 9, 1)},
		{&p, append(table(8), 1), table(9)},
		// 4 vnodes: one each; 1 vnode: the table.
		{&p, vnode(nil, 9, 2), vnode(nil, 9, 3)},
		{&p, vnode(nil, 10, 0), table(11)},
		// A table not in the catalog, and no catalog at all: the table.
		{&p, vnode(nil, 11, 0), table(12)},
		{nil, vnode(nil, 7, 3), table(8)},
		{&p, keys.MetaKey([]byte("name")), nil},
		// Keys shorter than a table id (not the store's) end at the
		// table bound just above them.
		{&p, nil, []byte{0, 0, 0, 0}},
		{nil, []byte{9, 1}, []byte{9, 1, 0, 0}},
	} {
		_, end, err := tc.spans.policy(tc.start)
		require.NoError(t, err)
		require.Equal(t, tc.end, end, "start %x", tc.start)
		require.True(t, within(tc.start, end), "start %x", tc.start)
		if end != nil {
			require.Negative(t, keys.Comparer.Compare(tc.start, end), "start %x", tc.start)
		}
	}
}
