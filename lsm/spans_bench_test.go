package lsm

import (
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// BenchmarkSmallTables measures what cutting small tables at their vnode
// partitions would cost: 64 tables of 256 vnodes, each checkpoint 100 rows
// of 100 bytes into each table, committed as one batch and flushed. Two
// stores side by side in one run: one with the default PartitionBytes
// (the tables stay below it: one SST per table per flush) and one that
// partitions every table (PartitionBytes 1: up to 16 per table). It
// reports each store's SSTs per flush and the partitioned store's time as
// a multiple of the other's (partitioned-x).
func BenchmarkSmallTables(b *testing.B) {
	const tables, rows, vnodes = 64, 100, 256
	type side struct {
		s       *Store
		ws      []*Writer
		elapsed time.Duration
		files   int64
	}
	open := func(partitionBytes int64) *side {
		s, err := Open(b.TempDir(), &Options{Logger: QuietLogger(nil), PartitionBytes: partitionBytes})
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		sd := &side{s: s}
		for id := uint32(1); id <= tables; id++ {
			require.NoError(b, s.CreateTable(TableDef{ID: id, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}))
			w, err := s.NewWriter(id, nil, &WriterOptions{Unchecked: true})
			require.NoError(b, err)
			b.Cleanup(func() { _ = w.Close() })
			sd.ws = append(sd.ws, w)
		}
		return sd
	}
	sides := []*side{open(0), open(1)}
	def := TableDef{VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}
	value := make([]byte, 100)
	checkpoint := func(sd *side, epoch uint64) {
		start := time.Now()
		for _, w := range sd.ws {
			for i := range uint64(rows) {
				pk := keys.AppendUint64(nil, epoch*rows+i)
				require.NoError(b, w.Insert(epoch, def.VnodeOf(pk), pk, value))
			}
			require.NoError(b, w.Seal(epoch))
		}
		require.NoError(b, sd.s.Commit(epoch))
		flushes := sd.s.db.Metrics().Flush.Count
		before := sd.s.db.Metrics().Levels[0].TablesFlushed
		require.NoError(b, sd.s.db.Flush())
		require.Greater(b, sd.s.db.Metrics().Flush.Count, flushes)
		sd.files += int64(sd.s.db.Metrics().Levels[0].TablesFlushed - before)
		sd.elapsed += time.Since(start)
	}
	b.ResetTimer()
	for i := range b.N {
		for _, sd := range sides {
			checkpoint(sd, uint64(i+1))
		}
	}
	b.StopTimer()
	require.True(b, sides[1].s.spans.partitioned(1))
	require.False(b, sides[0].s.spans.partitioned(1))
	b.ReportMetric(float64(sides[0].files)/float64(b.N), "ssts/flush")
	b.ReportMetric(float64(sides[1].files)/float64(b.N), "partitioned-ssts/flush")
	b.ReportMetric(float64(sides[1].elapsed)/float64(sides[0].elapsed), "partitioned-x")
	b.ReportMetric(0, "ns/op")
}
