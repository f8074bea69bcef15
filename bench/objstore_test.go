package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

var objstoreRows = flag.Int("objstore-rows", 200000, "rows of BenchmarkObjectStore's workload")

// objstoreCacheSize is the local cache of remote blocks of the store on
// the object store (lsm's ObjectStore.CacheSize), as the CLI's.
const objstoreCacheSize = 256 << 20

// BenchmarkObjectStore runs the same job (load, then the backfill with
// churn, the stats approach) on local disk and with the store's SSTs in a
// bucket of the test binary's S3 server on loopback (SeaweedFS), in turn
// within each iteration — the mixed workload in the vnode and the
// interleaved snapshot order, update churn in the vnode order;
// -objstore-rows sets the upstream's rows — and reports both sides'
// figures and their ratios
// (x-of-local, the object store's over local disk's):
//   - rows/s and s3-rows/s of the backfill's snapshot, and load-rows/s,
//     s3-load-rows/s of the load;
//   - progress CPU per checkpoint: the mean (progress-cpu-ns/barrier) and
//     the median (progress-p50-cpu-ns/barrier) of the CPU time of the
//     thread that computed the stats approach's figure. The figure reads
//     the live statistics only, in memory, the same on both sides; a mean
//     over ~50 checkpoints of ~15 µs each moves with every preemption or
//     cache-cold start of that thread, which a server sharing the
//     machine's cores makes likelier; the median does not;
//   - refresh per changed file: the time the statistics' refreshes took
//     over the run, per SST they added, removed or moved (wall time: on
//     the object store it holds the requests' round trips);
//   - the statistics' memory: the heap of the physical statistics
//     recomputed from the live SSTs plus the live statistics
//     (stats-heap-MB), and the time the recomputation took
//     (stats-load-ms: every live SST's statistics, as a reopened store
//     reads them);
//   - the object store's traffic per upstream row of the job (the
//     measurements after it excluded): requests, GETs, PUTs (single and
//     multipart parts), and bytes read and written.
//
// Whichever side runs first in a fresh process pays for its heap's growth
// (the page faults of memory touched the first time, in the estimating
// thread too: a mean progress CPU half again as high), and with one
// iteration the object store's side would always be first: the job runs
// once on local disk, unmeasured, before anything is measured.
func BenchmarkObjectStore(b *testing.B) {
	preset := func(b *testing.B, order string) workload.Params {
		p, err := workload.Preset(order, *objstoreRows, *benchVnodes, 7)
		require.NoError(b, err)
		p.DuringSteps = 40
		return p
	}
	config := func(b *testing.B, order string, snapshot backfill.SnapshotOrder, o *lsm.Options) Config {
		o.Logger = lsm.QuietLogger(nil)
		return Config{Dir: b.TempDir(), Workload: preset(b, order), Actors: 2, ChunkSize: 256, BarrierRows: 2048,
			Approaches: []string{"stats"}, Store: o, SnapshotOrder: snapshot}
	}
	sum, err := Run(context.Background(), config(b, "mixed", backfill.VnodeOrder, &lsm.Options{}))
	require.NoError(b, err)
	require.True(b, sum.MVMatches, sum.MVError)
	// The mixed workload in both snapshot orders (RisingWave's interleaved
	// order reads the vnodes' rows in turn, a seek per chunk and vnode);
	// update churn in the vnode order.
	cells := []struct {
		order    string
		snapshot backfill.SnapshotOrder
	}{{"mixed", backfill.VnodeOrder}, {"mixed", backfill.Interleaved}, {"update-churn", backfill.VnodeOrder}}
	for _, cell := range cells {
		order := cell.order
		b.Run(fmt.Sprintf("workload=%s/order=%s", order, cell.snapshot), func(b *testing.B) {
			srv := s3server.Shared(b)
			var local, remote objstoreSide
			var traffic objstore.Stats
			var rows float64
			for i := range b.N {
				bucket, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(b), Prefix: "bench/",
					AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
				require.NoError(b, err)
				run := func(o *lsm.Options, side *objstoreSide, probe func(func())) {
					cfg := config(b, order, cell.snapshot, o)
					cfg.OnEnd = func(s *Session) {
						side.refreshes = addRefreshes(side.refreshes, lsminternal.StoreTracker(s.Store).RefreshCounts())
						probe(func() {
							h := measureStatsHeap(b, s.Store)
							side.heap += h.physical + h.live
							side.load += h.load
						})
					}
					sum, err := Run(context.Background(), cfg)
					require.NoError(b, err)
					require.True(b, sum.MVMatches, sum.MVError)
					side.add(sum)
				}
				inTurn(i, func() {
					before := bucket.Stats()
					var probed objstore.Stats
					run(&lsm.Options{ObjectStore: &objstore.StoreOptions{Storage: bucket, CacheSize: objstoreCacheSize}}, &remote,
						func(measure func()) {
							at := bucket.Stats()
							measure()
							probed = bucket.Stats().Sub(at)
						})
					traffic = addStats(traffic, bucket.Stats().Sub(before).Sub(probed))
				}, func() { run(&lsm.Options{}, &local, func(measure func()) { measure() }) })
				require.NoError(b, bucket.Close())
				rows += float64(preset(b, order).Rows)
			}
			ratio := func(name string, s3, loc float64) {
				b.ReportMetric(s3, "s3-"+name)
				b.ReportMetric(loc, name)
			}
			ratio("rows/s", remote.tp.store.SnapshotRate(), local.tp.store.SnapshotRate())
			b.ReportMetric(remote.tp.store.SnapshotRate()/local.tp.store.SnapshotRate(), "x-of-local")
			ratio("load-rows/s", remote.tp.store.LoadRate(), local.tp.store.LoadRate())
			b.ReportMetric(remote.tp.store.LoadRate()/local.tp.store.LoadRate(), "load-x-of-local")
			ratio("progress-cpu-ns/barrier", remote.progress/float64(b.N), local.progress/float64(b.N))
			b.ReportMetric(remote.progress/local.progress, "progress-x-of-local")
			ratio("progress-p50-cpu-ns/barrier", remote.progressMedian(), local.progressMedian())
			b.ReportMetric(remote.progressMedian()/local.progressMedian(), "progress-p50-x-of-local")
			ratio("refresh-ns/changed-file", remote.refreshPerFile(), local.refreshPerFile())
			b.ReportMetric(remote.refreshPerFile()/local.refreshPerFile(), "refresh-x-of-local")
			ratio("stats-heap-MB", remote.heap/float64(b.N)/1e6, local.heap/float64(b.N)/1e6)
			b.ReportMetric(remote.heap/local.heap, "stats-heap-x-of-local")
			ratio("stats-load-ms", ms(remote.load)/float64(b.N), ms(local.load)/float64(b.N))
			b.ReportMetric(float64(remote.load)/float64(local.load), "stats-load-x-of-local")
			tot := traffic.Total()
			puts := traffic.Of(objstore.KindPut).Requests + traffic.Of(objstore.KindUploadPart).Requests
			b.ReportMetric(float64(tot.Requests)/rows, "requests/row")
			b.ReportMetric(float64(traffic.Of(objstore.KindGet).Requests)/rows, "gets/row")
			b.ReportMetric(float64(puts)/rows, "puts/row")
			b.ReportMetric(float64(traffic.Of(objstore.KindGet).Bytes)/rows, "read-bytes/row")
			b.ReportMetric(float64(traffic.Of(objstore.KindPut).Bytes+traffic.Of(objstore.KindUploadPart).Bytes)/rows, "written-bytes/row")
			b.ReportMetric(float64(tot.Retries), "retries")
			b.ReportMetric((remote.tp.store.Load+remote.tp.store.Backfill).Seconds()*1e9/float64(b.N), "ns/op")
			if testing.Verbose() {
				b.Logf("%s: %s", order, describeTraffic(traffic))
			}
		})
	}
}

// objstoreSide is what BenchmarkObjectStore measured on one side.
type objstoreSide struct {
	tp throughput
	// progress sums the runs' mean CPU per checkpoint of the stats
	// approach; checkpoints their checkpoints' each.
	progress    float64
	checkpoints []time.Duration
	refreshes   ssttracker.RefreshCounts
	heap        float64
	load        time.Duration
}

func (s *objstoreSide) add(sum Summary) {
	s.tp.add(sum)
	s.progress += sum.ProgressNanos["stats"]
	for _, r := range sum.Records {
		if f := backfill.FigureOf(r.Figures, "stats"); f.CPU > 0 {
			s.checkpoints = append(s.checkpoints, f.CPU)
		}
	}
}

// progressMedian returns the median CPU time of a checkpoint's figure, in
// nanoseconds.
func (s *objstoreSide) progressMedian() float64 {
	return float64(durationQuantile(s.checkpoints, 0.5).Nanoseconds())
}

// refreshPerFile returns the refreshes' time per changed file, in
// nanoseconds.
func (s *objstoreSide) refreshPerFile() float64 {
	return float64(s.refreshes.Time.Nanoseconds()) / float64(max(s.refreshes.ChangedFiles, 1))
}

// addRefreshes adds the counts of b to a.
func addRefreshes(a, b ssttracker.RefreshCounts) ssttracker.RefreshCounts {
	return ssttracker.RefreshCounts{Refreshes: a.Refreshes + b.Refreshes, Listings: a.Listings + b.Listings,
		ChangedFiles: a.ChangedFiles + b.ChangedFiles, Time: a.Time + b.Time}
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// addStats adds the counters of b to a.
func addStats(a, b objstore.Stats) objstore.Stats {
	// Stats has no Add: a - (0 - b).
	return a.Sub(objstore.Stats{}.Sub(b))
}

// describeTraffic lists the requests of each kind that was used.
func describeTraffic(s objstore.Stats) string {
	out := ""
	for _, k := range objstore.Kinds() {
		if ks := s.Of(k); ks.Requests > 0 {
			out += fmt.Sprintf(" %s=%d (%.1f MiB, %s)", k, ks.Requests, float64(ks.Bytes)/(1<<20), ks.Latency.Round(time.Millisecond))
		}
	}
	return out
}
