package bench

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
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
// within each iteration, and reports both sides' throughputs and their
// ratios: rows/s and s3-rows/s of the backfill's snapshot, x-of-local;
// load-rows/s, s3-load-rows/s, load-x-of-local; progress CPU per
// checkpoint on each side and progress-x-of-local; and the object store's
// traffic per upstream row: requests, GETs, PUTs (single and multipart
// parts), and bytes read and written.
func BenchmarkObjectStore(b *testing.B) {
	for _, order := range []string{"mixed", "update-churn"} {
		b.Run("workload="+order, func(b *testing.B) {
			srv := s3server.Shared(b)
			var local, remote throughput
			var localProg, remoteProg float64
			var traffic objstore.Stats
			var rows float64
			for i := range b.N {
				p, err := workload.Preset(order, *objstoreRows, *benchVnodes, 7)
				require.NoError(b, err)
				p.DuringSteps = 40
				cfg := func(o *lsm.Options) Config {
					o.Logger = lsm.QuietLogger(nil)
					return Config{Dir: b.TempDir(), Workload: p, Actors: 2, ChunkSize: 256, BarrierRows: 2048,
						Approaches: []string{"stats"}, Store: o}
				}
				bucket, err := objstore.New(objstore.Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(b), Prefix: "bench/",
					AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
				require.NoError(b, err)
				run := func(o *lsm.Options, t *throughput, prog *float64) {
					sum, err := Run(context.Background(), cfg(o))
					require.NoError(b, err)
					require.True(b, sum.MVMatches, sum.MVError)
					t.add(sum)
					*prog += sum.ProgressNanos["stats"]
				}
				inTurn(i, func() {
					before := bucket.Stats()
					run(&lsm.Options{ObjectStore: &objstore.StoreOptions{Storage: bucket, CacheSize: objstoreCacheSize}}, &remote, &remoteProg)
					traffic = addStats(traffic, bucket.Stats().Sub(before))
				}, func() { run(&lsm.Options{}, &local, &localProg) })
				require.NoError(b, bucket.Close())
				rows += float64(p.Rows)
			}
			b.ReportMetric(remote.store.SnapshotRate(), "s3-rows/s")
			b.ReportMetric(local.store.SnapshotRate(), "rows/s")
			b.ReportMetric(remote.store.SnapshotRate()/local.store.SnapshotRate(), "x-of-local")
			b.ReportMetric(remote.store.LoadRate(), "s3-load-rows/s")
			b.ReportMetric(local.store.LoadRate(), "load-rows/s")
			b.ReportMetric(remote.store.LoadRate()/local.store.LoadRate(), "load-x-of-local")
			b.ReportMetric(remoteProg/float64(b.N), "s3-progress-cpu-ns/barrier")
			b.ReportMetric(localProg/float64(b.N), "progress-cpu-ns/barrier")
			b.ReportMetric(remoteProg/localProg, "progress-x-of-local")
			tot := traffic.Total()
			puts := traffic.Of(objstore.KindPut).Requests + traffic.Of(objstore.KindUploadPart).Requests
			b.ReportMetric(float64(tot.Requests)/rows, "requests/row")
			b.ReportMetric(float64(traffic.Of(objstore.KindGet).Requests)/rows, "gets/row")
			b.ReportMetric(float64(puts)/rows, "puts/row")
			b.ReportMetric(float64(traffic.Of(objstore.KindGet).Bytes)/rows, "read-bytes/row")
			b.ReportMetric(float64(traffic.Of(objstore.KindPut).Bytes+traffic.Of(objstore.KindUploadPart).Bytes)/rows, "written-bytes/row")
			b.ReportMetric(float64(tot.Retries), "retries")
			b.ReportMetric((remote.store.Load+remote.store.Backfill).Seconds()*1e9/float64(b.N), "ns/op")
			if testing.Verbose() {
				b.Logf("%s: %s", order, describeTraffic(traffic))
			}
		})
	}
}

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
