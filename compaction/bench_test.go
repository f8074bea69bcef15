package compaction

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// BenchmarkPolicyRoundIdle is the cost of a round when nothing needs GC
// (the goal is negligible), on four tables of 256 vnodes with 40 rows per
// vnode:
//
//	state=clean            one entry per live row: the table prefilter
//	                       skips every table (O(tables))
//	state=below-threshold  every vnode holds some garbage, the tables'
//	                       totals pass the prefilter but no vnode reaches a
//	                       trigger: every vnode is evaluated (O(vnodes))
//
// ns/round is the time of one RunRound (equal to ns/op).
func BenchmarkPolicyRoundIdle(b *testing.B) {
	for _, state := range []string{"clean", "below-threshold"} {
		b.Run(fmt.Sprintf("tables=4/vnodes=256/state=%s", state), func(b *testing.B) {
			s := openStore(b)
			defer func() { require.NoError(b, s.Close()) }()
			var wls []*workload
			for table := uint32(1); table <= 4; table++ {
				wls = append(wls, newWorkload(b, s, table, 256, uint64(table)))
			}
			run(b, s, 1, 256*40, 0, 0, wls...)
			// About 4 garbage versions per vnode: 1000 per table.
			run(b, s, 1, 256*4, 100, 0, wls...)
			th := Thresholds{MinGarbage: 512}
			if state == "clean" {
				for table := uint32(1); table <= 4; table++ {
					_, err := s.GC(context.Background(), lsm.GCRequest{Table: table})
					require.NoError(b, err)
					require.NoError(b, s.CompactRange(context.Background(), table, 0, 0))
				}
				th = Thresholds{}
			}
			p, err := New(Config{Store: s, Thresholds: th, Rate: -1})
			require.NoError(b, err)
			require.Empty(b, p.Plan())
			ctx := context.Background()
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				rd, err := p.RunRound(ctx)
				if err != nil || len(rd.Candidates) != 0 {
					b.Fatalf("round did work: %+v %v", rd, err)
				}
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N), "ns/round")
		})
	}
}

// BenchmarkPolicyRoundWork is the cost of a round that collects a churned
// table (64 vnodes, 40,000 rows, 20 epochs of 30% updates and 30% deletes),
// with ranges of at most 8 or 64 vnodes (all ranges in one round):
//
//	ms/round          the round's wall time (GC and compactions)
//	ranges            ranges processed
//	compacted-bytes   SST bytes Pebble's compactions wrote during the round
//	compacted/live    compacted-bytes over the live SST bytes after the round:
//	                  Pebble compacts whole SSTs, so each range compaction
//	                  rewrites every SST it overlaps, not only its vnodes
func BenchmarkPolicyRoundWork(b *testing.B) {
	for _, width := range []int{8, 64} {
		b.Run(fmt.Sprintf("vnodes=64/range-width=%d", width), func(b *testing.B) {
			var elapsed time.Duration
			var ranges int
			var compacted, live int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				s := openStore(b)
				wl := newWorkload(b, s, 1, 64, uint64(i+1))
				run(b, s, 4, 10000, 0, 0, wl)
				run(b, s, 20, 2000, 30, 30, wl)
				require.NoError(b, s.CompactRange(context.Background(), 1, 0, 0))
				p, err := New(Config{Store: s, MaxRangesPerRound: 1 << 10, MaxVnodesPerRange: width, Thresholds: Thresholds{MinGarbage: 64}, Rate: -1})
				require.NoError(b, err)
				before := compactedBytes(b, s)
				b.StartTimer()
				start := time.Now()
				rd, err := p.RunRound(context.Background())
				elapsed += time.Since(start)
				b.StopTimer()
				require.NoError(b, err)
				ranges += len(rd.Candidates)
				compacted += compactedBytes(b, s) - before
				pm, err := s.PebbleMetrics()
				require.NoError(b, err)
				live += pm.Total().TablesSize
				requireClean(b, s, wl)
				require.NoError(b, s.Close())
			}
			n := float64(b.N)
			b.ReportMetric(float64(elapsed.Milliseconds())/n, "ms/round")
			b.ReportMetric(float64(ranges)/n, "ranges")
			b.ReportMetric(float64(compacted)/n, "compacted-bytes")
			b.ReportMetric(float64(compacted)/float64(live), "compacted/live")
		})
	}
}

func compactedBytes(b *testing.B, s *lsm.Store) int64 {
	var n int64
	m, err := s.PebbleMetrics()
	require.NoError(b, err)
	for i := range m.Levels {
		n += int64(m.Levels[i].TableBytesCompacted)
	}
	return n
}
