package bench

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/malloc"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

var (
	scaleRows      = flag.String("scale-rows", "1M", "table sizes of BenchmarkScale, comma-separated (e.g. 1M,4M,16M)")
	scaleLSM       = flag.Bool("scale-lsm", false, "log the LSM shape (Pebble's metrics) at the end of each run")
	scaleWorkloads = flag.String("scale-workloads", "uniform,update-churn", "workloads of BenchmarkScale, comma-separated")
	scaleOrders    = flag.String("scale-orders", "vnode,interleaved", "snapshot orders of BenchmarkScale's job (backfill.SnapshotOrder), comma-separated")
	scaleShape     = flag.String("scale-shape", "", "pk shape of BenchmarkScale's tables (workload.Shapes), instead of the workload's")
	scaleBudget    = flag.Int("scale-bucket-budget", 0, "the store's StatsBucketBudget in BenchmarkScale (0: the default, stats.TableBucketBudget)")
	scaleSolo      = flag.Bool("scale-solo", true, "run the uniform workload's solo child too (solo_test.go): the memory of a process holding only the store and the job")
	scaleSoloCache = flag.Int64("scale-solo-cache", 0, "block cache of the solo child, in bytes (0: the store's default, an eighth of the machine's memory)")
	scaleSoloProf  = flag.String("scale-solo-profile", "", "directory for CPU profiles of the solo child's backfills (solo-<rows>-<order>.pprof; empty: none)")
	scaleSoloRaw   = flag.Bool("scale-solo-raw", true, "run the raw-Pebble solo child beside the store's (solo_test.go): its memory and cost per row are the yardstick of the store's")
	scaleTruth     = flag.String("scale-truth", "concurrent", "how BenchmarkScale computes the truth of its checkpoints (the stats-err metrics): concurrent (beside the job, which does not wait for it, as the CLI does) or inline (in the job's steps, its time taken out of the job's but not out of its path); TruthMode")
	scaleSoloOnly  = flag.Bool("scale-solo-only", false, "run the solo child alone, without the in-process pipelines (its metrics merge into an earlier run's in make results)")
)

// BenchmarkScale runs the backfill job of the CLI's defaults (256 vnodes, 2
// actors, 2,048 snapshot rows per actor per checkpoint, the churn spread
// over the backfill, the stats approach) at each size of -scale-rows, each
// workload of -scale-workloads and each snapshot order of -scale-orders
// (sub-benchmarks of the default, vnode order have no order= part), and the
// raw-Pebble pipelines on the same rows right after it, each with the
// store's Pebble options (lsm.Options.PebbleOptions) and with Pebble's
// defaults (PebbleDefaults), and reports per size how the cost of each
// part grows with the table:
//
//	rows/s, raw-rows/s, x-of-raw-pebble     snapshot rows per second, both;
//	                                        raw Pebble reads in pk order, as
//	                                        the actors do in VnodeOrder
//	raw-default-rows/s, x-of-raw-default    the same with Pebble's default
//	                                        options (the vnode order)
//	raw-interleaved-rows/s,                 raw Pebble reading the vnodes in
//	x-of-raw-interleaved,                   turn as the actors do in the
//	raw-interleaved-default-rows/s,         Interleaved order
//	x-of-raw-interleaved-default            (RunRawInterleaved; that order
//	                                        only), with the store's options
//	                                        and Pebble's defaults
//	load-rows/s, raw-load-rows/s,           the load (and churn before the
//	load-x-of-raw-pebble,                   backfill), ops per second, and
//	load-x-of-raw-default                   against Pebble's defaults
//	stats-share-flushed-%,                  the statistics' share of the bytes
//	stats-share-compacted-%, stats-share-%  the store's Pebble wrote into SSTs
//	                                        by flushes, by compactions and by
//	                                        both, over the whole run: the
//	                                        metadata rows (live statistics'
//	                                        buckets and the rest) and the
//	                                        payload of the physical ones
//	                                        (statsShare says how they are
//	                                        counted)
//	flushed-MB, compacted-MB,               the bytes the store's Pebble
//	raw-flushed-MB, raw-compacted-MB        flushed and compacted over the
//	                                        whole run, and raw Pebble's with
//	                                        the store's options
//	backfill-ns/row, backfill-cpu-ns/row,   wall and process CPU per row of
//	load-ns/row, load-cpu-ns/row            each phase (the store's)
//	solo-peak-rss-MB, solo-cache-MB,        a child process holding only
//	solo-memtable-MB, solo-beyond-caches-MB, the store and the job
//	solo-go-heap-MB, solo-go-live-MB,       (solo_test.go; the uniform
//	solo-malloc-in-use-MB,                  workload only): its peak RSS,
//	solo-malloc-free-MB                     the largest block cache and
//	                                        memtables Pebble reported, the
//	                                        peak RSS beyond those two, the
//	                                        Go heap it kept from the OS and
//	                                        held live at the end, and what
//	                                        malloc held at the end, in use
//	                                        and free but kept
//	solo-load-ns/row, solo-load-cpu-ns/row, the child's wall and CPU per
//	solo-backfill-ns/row,                   row of the load and of the
//	solo-backfill-cpu-ns/row                backfill, without the harness
//	solo-settle-ns/row,                     after the backfill, until Pebble
//	solo-settle-compacted-MB                starts no more compactions: the
//	                                        compaction work the phases left
//	                                        behind, per row, and its bytes
//	solo-raw-...                            the same of the raw-Pebble
//	                                        child (-scale-solo-raw)
//	solo-total-x-of-raw                     raw Pebble's load + backfill +
//	                                        settle over the store's: the
//	                                        same work, deferred or not
//	peak-rss-MB, raw-peak-rss-MB,           peak RSS of the process during
//	harness-MB, cache-MB                    each pipeline (both hold the
//	                                        workload model, harness-MB of
//	                                        heap, and the same Pebble caches
//	                                        and memtables), and the store's
//	                                        block cache at the end
//	closed-heap-MB                          the Go heap that closing the
//	                                        store and the job freed (the
//	                                        workload model is kept): what
//	                                        they held at the end. Pebble's
//	                                        block cache and memtables are
//	                                        manual memory, outside it
//	stats-heap-MB                           heap held by the statistics
//	                                        (physical Version rebuilt from
//	                                        the SSTs, live buckets reloaded)
//	stats-bytes/Mkeys                       that and reader-payload-MB (the
//	                                        copy Pebble's readers hold), per
//	                                        million keys of both tables
//	physical-heap-MB, live-heap-MB,         the two parts of it, and the
//	live-meta-rows                          live statistics' metadata rows
//	                                        (one per bucket and a few more)
//	live-load-ms                            the time to load the live
//	                                        statistics from those rows, as
//	                                        Open does (the delta log
//	                                        replayed onto the bucket rows)
//	payload-MB, reader-payload-MB           the statistics payload of the
//	                                        live SSTs, and the heap that
//	                                        Pebble's sstable readers (as its
//	                                        file cache opens them) hold for
//	                                        it in UserProperties, measured by
//	                                        dropping it from those maps
//	progress-cpu-ns/barrier                 the stats estimate per checkpoint
//	stats-err-mean-pp, stats-err-max-pp,    its error against the truth over
//	stats-err-signed-pp,                    the checkpoints, in percentage
//	stats-bounds-mean-pp,                   points, its bounds' mean width
//	stats-outside-bounds                    and the checkpoints whose truth
//	                                        lay outside them
//	bucket-scans/commit,                    the live buckets scanned to be
//	bucket-scan-rows/row                    split or calibrated, per commit,
//	                                        and the rows scanned per row
//	                                        loaded or read
//	refresh-ns/changed-file                 statistics refresh time per
//	                                        file a flush or a compaction
//	                                        of a scratch table changed
//	                                        (median over the probe's steps)
//	listing-ns                              a listing of the live SSTs
//	                                        (O(files)), which a refresh
//	                                        needs only when the changes
//	                                        events report do not add up
//	run-refresh-ns/changed-file,            over the whole run (load and
//	run-changed-files,                      backfill): refresh time per
//	run-refresh-listings                    changed file, the files changed
//	                                        and the refreshes that listed
//	commit-p50-ms, commit-p99-ms,           Store.Commit latency of the
//	load-commit-p50-ms, load-commit-p99-ms  backfill's and the load's
//	                                        checkpoints
//	ssts, l0-sublevels, max-l0-sublevels    at the end, and the most seen at
//	                                        any checkpoint
//
// The truth of each checkpoint (the stats-err metrics) is computed beside
// the job (TruthConcurrent, as the CLI does; -scale-truth inline puts it
// back in the job's steps): inline, its time was taken out of the job's
// but not its cost to the job, and at 1M rows (uniform) the job ran at
// 109-122k rows/s against 172k beside it and 153-233k in
// lsmstats backfill --no-truth on this shared machine.
//
// The MV must equal the upstream at the end of the run (both pipelines).
// make bench runs it at 1M rows; make scale at 1M, 4M and 16M.
func BenchmarkScale(b *testing.B) {
	sizes, err := parseSizes(*scaleRows)
	require.NoError(b, err)
	var orders []backfill.SnapshotOrder
	for _, o := range strings.Split(*scaleOrders, ",") {
		order, err := backfill.ParseSnapshotOrder(o)
		require.NoError(b, err)
		orders = append(orders, order)
	}
	for _, rows := range sizes {
		for _, name := range strings.Split(*scaleWorkloads, ",") {
			for _, order := range orders {
				sub := fmt.Sprintf("rows=%s/workload=%s", sizeName(rows), name)
				if order != backfill.VnodeOrder {
					sub += "/order=" + order.String()
				}
				b.Run(sub, func(b *testing.B) {
					for range b.N {
						scaleRun(b, rows, name, order)
					}
				})
			}
		}
	}
}

func scaleConfig(b *testing.B, rows int, name string, order backfill.SnapshotOrder) Config {
	p, err := workload.Preset(name, rows, 256, 7)
	require.NoError(b, err)
	if *scaleShape != "" {
		p.Shape, err = workload.ParseShape(*scaleShape)
		require.NoError(b, err)
	}
	const actors, barrierRows = 2, 2048
	p.DuringSteps = max(1, rows/(actors*barrierRows)) // the CLI's default
	cfg := Config{Dir: b.TempDir(), Workload: p, Actors: actors, ChunkSize: 256, BarrierRows: barrierRows, SnapshotOrder: order,
		Approaches: []string{"stats"}, Store: &lsm.Options{Logger: lsm.QuietLogger(nil), StatsBucketBudget: *scaleBudget}}
	switch *scaleTruth {
	case "inline":
	case "concurrent":
		cfg.Truth = TruthConcurrent
	default:
		b.Fatalf("-scale-truth %q: want inline or concurrent", *scaleTruth)
	}
	tune(cfg.Store)
	return cfg
}

// scaleRun runs one size: the store, then raw Pebble. The metrics are of
// the last iteration.
func scaleRun(b *testing.B, rows int, name string, order backfill.SnapshotOrder) {
	if *scaleSoloOnly {
		reportSolo(b, rows, name, order)
		return
	}
	cfg := scaleConfig(b, rows, name, order)
	share := newStatsShare(cfg.Store.PebbleOptions().MakeReaderOptions())
	cfg.Store.EventListener = share.listener()
	var (
		base, harness         float64
		maxL0, checkpoints    int
		store                 *lsm.Store
		probe                 scaleProbe
		peakStore, peakRaw    float64
		baseStore, baseRawRSS float64
		heapAtEnd             float64
		gens                  []*workload.Generator
	)
	var shareFrom, shareTo LSMWrites // Pebble's metrics over the share's time
	cfg.OnStart = func(s *Session) {
		store = s.Store
		share.setDir(lsminternal.PebbleDir(s.Store))
		var err error
		shareFrom, err = storeWrites(s.Store)
		require.NoError(b, err)
		base = heapLive()
		baseStore = resetPeakRSS()
	}
	cfg.OnPhase = func(p string) {
		// Every 16th checkpoint: L0 of the store (Metrics takes Pebble's
		// mutex and walks the version; not every time).
		if p == "progress" {
			if checkpoints++; checkpoints%16 == 0 {
				if m, err := store.PebbleMetrics(); err == nil { // open while the run runs
					maxL0 = max(maxL0, int(m.Levels[0].Sublevels))
				}
			}
		}
	}
	heapBeforeOpen := heapLive()
	var splits lsm.Metrics
	var refreshes ssttracker.RefreshCounts
	var flushed, compacted shareBytes
	var missed int
	var shareErr error
	cfg.OnEnd = func(s *Session) {
		// The run's SSTs only (to the end of the MV's check), not the
		// probe's below.
		flushed, compacted, missed, shareErr = share.close()
		var err error
		shareTo, err = storeWrites(s.Store)
		require.NoError(b, err)
		splits = s.Store.Metrics()
		refreshes = lsminternal.StoreTracker(s.Store).RefreshCounts()
		if *scaleLSM {
			m, err := s.Store.PebbleMetrics()
			require.NoError(b, err)
			b.Logf("store LSM at the end:\n%s", m)
		}
		peakStore = peakRSS()
		harness = base - heapBeforeOpen
		heapAtEnd, gens = heapLive(), s.Gens
		probe = probeStore(b, s, cfg)
	}
	sum, err := Run(context.Background(), cfg)
	require.NoError(b, err)
	// Each pipeline's directory goes once it is measured: at 16M rows
	// with churn the five of a cell would hold over 30 GB at once.
	require.NoError(b, os.RemoveAll(cfg.Dir))
	require.True(b, sum.MVMatches, sum.MVError)
	require.Zero(b, missed, "SSTs the statistics' share could not read: %v", shareErr)
	// Run closed the session: the store, the job and their sources are
	// gone, the workload model (gens) and the run's records (sum) are not.
	store = nil
	closedHeap := heapAtEnd - heapLive()
	runtime.KeepAlive(gens)

	rcfg := cfg
	rcfg.Dir = b.TempDir()
	rcfg.OnPhase, rcfg.OnEnd = nil, func(s *Session) {
		if *scaleLSM {
			b.Logf("raw LSM at the end:\n%s", s.Raw.Metrics())
		}
	}
	rcfg.OnStart = func(*Session) { baseRawRSS = resetPeakRSS() }
	raw, err := RunRaw(context.Background(), rcfg)
	require.NoError(b, err)
	require.NoError(b, os.RemoveAll(rcfg.Dir))
	peakRaw = peakRSS()
	rcfg.OnStart, rcfg.OnEnd = nil, nil
	// The same with Pebble's default options, in the job's order; and
	// raw Pebble reading the vnodes in turn for the interleaved order,
	// with both.
	dcfg := rcfg
	dcfg.RawOptions = func() *pebble.Options { return PebbleDefaults(lsm.QuietLogger(nil)) }
	runRawIn := func(c Config, interleaved bool) RawResult {
		c.Dir = b.TempDir()
		f := RunRaw
		if interleaved {
			f = RunRawInterleaved
		}
		r, err := f(context.Background(), c)
		require.NoError(b, err)
		require.NoError(b, os.RemoveAll(c.Dir))
		return r
	}
	def := runRawIn(dcfg, false)
	var inter, interDef RawResult
	if order == backfill.Interleaved {
		inter, interDef = runRawIn(rcfg, true), runRawIn(dcfg, true)
	}
	if *scaleSolo {
		reportSolo(b, rows, name, order)
	}
	b.Logf("rows=%d %s: store load %s backfill %s (harness %s); raw load %s backfill %s; rss at start %.0f/%.0f MB",
		rows, name, sum.Load.Round(time.Millisecond), sum.Backfill.Round(time.Millisecond), sum.Harness.Round(time.Millisecond),
		raw.Load.Round(time.Millisecond), raw.Backfill.Round(time.Millisecond), baseStore/1e6, baseRawRSS/1e6)

	var t throughput
	t.add(sum)
	t.raw = raw
	t.report(b)
	b.ReportMetric(def.SnapshotRate(), "raw-default-rows/s")
	b.ReportMetric(sum.SnapshotRate()/def.SnapshotRate(), "x-of-raw-default")
	b.ReportMetric(def.LoadRate(), "raw-default-load-rows/s")
	b.ReportMetric(sum.LoadRate()/def.LoadRate(), "load-x-of-raw-default")
	b.ReportMetric(flushed.share(), "stats-share-flushed-%")
	b.ReportMetric(compacted.share(), "stats-share-compacted-%")
	b.ReportMetric(flushed.add(compacted).share(), "stats-share-%")
	mb := func(w LSMWrites, f func(LSMWrites) uint64) float64 { return float64(f(w)) / 1e6 }
	flushedOf := func(w LSMWrites) uint64 { return w.Flushed }
	compactedOf := func(w LSMWrites) uint64 { return w.Compacted }
	b.ReportMetric(mb(sum.LoadLSM, flushedOf)+mb(sum.BackfillLSM, flushedOf), "flushed-MB")
	b.ReportMetric(mb(sum.LoadLSM, compactedOf)+mb(sum.BackfillLSM, compactedOf), "compacted-MB")
	b.ReportMetric(mb(raw.LoadLSM, flushedOf)+mb(raw.BackfillLSM, flushedOf), "raw-flushed-MB")
	b.ReportMetric(mb(raw.LoadLSM, compactedOf)+mb(raw.BackfillLSM, compactedOf), "raw-compacted-MB")
	b.Logf("rows=%d %s: statistics' share of bytes flushed %.2f%% (%d SSTs, %.1f MB: metadata rows %.2f MB from %.0f rows, payload %.2f MB), compacted %.2f%% (%d SSTs, %.1f MB: metadata rows %.2f MB, payload %.2f MB); Pebble's metrics over the same time: %.1f MB flushed, %.1f MB compacted; reading the SSTs took %s beside the run",
		rows, name, flushed.share(), flushed.files, flushed.sst/1e6, flushed.meta/1e6, flushed.metaKVs, flushed.payload/1e6,
		compacted.share(), compacted.files, compacted.sst/1e6, compacted.meta/1e6, compacted.payload/1e6,
		mb(shareTo.Sub(shareFrom), flushedOf), mb(shareTo.Sub(shareFrom), compactedOf), share.readTime().Round(time.Millisecond))
	perRow := func(d time.Duration, n uint64) float64 { return float64(d.Nanoseconds()) / float64(max(n, 1)) }
	b.ReportMetric(perRow(sum.Backfill, sum.SnapshotRows), "backfill-ns/row")
	b.ReportMetric(perRow(sum.BackfillCPU, sum.SnapshotRows), "backfill-cpu-ns/row")
	b.ReportMetric(perRow(sum.Load, sum.LoadOps), "load-ns/row")
	b.ReportMetric(perRow(sum.LoadCPU, sum.LoadOps), "load-cpu-ns/row")
	if order == backfill.Interleaved {
		b.ReportMetric(inter.SnapshotRate(), "raw-interleaved-rows/s")
		b.ReportMetric(sum.SnapshotRate()/inter.SnapshotRate(), "x-of-raw-interleaved")
		b.ReportMetric(interDef.SnapshotRate(), "raw-interleaved-default-rows/s")
		b.ReportMetric(sum.SnapshotRate()/interDef.SnapshotRate(), "x-of-raw-interleaved-default")
		b.ReportMetric(perRow(inter.BackfillCPU, inter.SnapshotRows), "raw-interleaved-cpu-ns/row")
		b.ReportMetric(float64(inter.BackfillLSM.Compacted)/float64(max(inter.SnapshotRows, 1)), "raw-interleaved-compact-B/row")
	}
	b.ReportMetric(perRow(raw.BackfillCPU, raw.SnapshotRows), "raw-backfill-cpu-ns/row")
	b.ReportMetric(perRow(raw.LoadCPU, raw.LoadOps), "raw-load-cpu-ns/row")
	b.ReportMetric(float64(sum.BackfillLSM.Compacted)/float64(max(sum.SnapshotRows, 1)), "backfill-compact-B/row")
	b.ReportMetric(float64(raw.BackfillLSM.Compacted)/float64(max(raw.SnapshotRows, 1)), "raw-backfill-compact-B/row")
	b.ReportMetric(float64(sum.LoadLSM.Compacted)/float64(max(sum.LoadOps, 1)), "load-compact-B/row")
	b.ReportMetric(float64(raw.LoadLSM.Compacted)/float64(max(raw.LoadOps, 1)), "raw-load-compact-B/row")
	b.ReportMetric(float64(refreshes.Time.Nanoseconds())/float64(max(refreshes.ChangedFiles, 1)), "run-refresh-ns/changed-file")
	b.ReportMetric(float64(refreshes.ChangedFiles), "run-changed-files")
	b.ReportMetric(float64(refreshes.Listings), "run-refresh-listings")
	b.ReportMetric(peakStore/1e6, "peak-rss-MB")
	b.ReportMetric(peakRaw/1e6, "raw-peak-rss-MB")
	b.ReportMetric(harness/1e6, "harness-MB")
	b.ReportMetric(probe.cache/1e6, "cache-MB")
	b.ReportMetric(closedHeap/1e6, "closed-heap-MB")
	b.ReportMetric(probe.statsHeap/1e6, "stats-heap-MB")
	b.ReportMetric((probe.statsHeap+probe.readerPayload)/(float64(probe.keys)/1e6), "stats-bytes/Mkeys")
	b.ReportMetric(probe.physicalHeap/1e6, "physical-heap-MB")
	b.ReportMetric(probe.liveHeap/1e6, "live-heap-MB")
	b.ReportMetric(float64(probe.liveRows), "live-meta-rows")
	b.ReportMetric(float64(probe.liveLoad.Microseconds())/1e3, "live-load-ms")
	b.ReportMetric(probe.payload/1e6, "payload-MB")
	b.ReportMetric(probe.readerPayload/1e6, "reader-payload-MB")
	b.ReportMetric(sum.ProgressNanos["stats"], "progress-cpu-ns/barrier")
	if e := sum.Errors["stats"]; e != nil {
		b.ReportMetric(e.MeanPP, "stats-err-mean-pp")
		b.ReportMetric(e.MaxPP, "stats-err-max-pp")
		b.ReportMetric(e.SignedPP, "stats-err-signed-pp")
		b.ReportMetric(e.WidthMeanPP, "stats-bounds-mean-pp")
		b.ReportMetric(float64(e.Outside), "stats-outside-bounds")
	}
	b.ReportMetric(float64(splits.BucketScans)/float64(max(splits.Commits, 1)), "bucket-scans/commit")
	b.ReportMetric(float64(splits.BucketScanRows)/float64(max(sum.LoadOps+sum.SnapshotRows, 1)), "bucket-scan-rows/row")
	b.ReportMetric(probe.refreshPerFile, "refresh-ns/changed-file")
	b.ReportMetric(probe.listing, "listing-ns")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	b.ReportMetric(ms(durationQuantile(sum.BackfillCommits, 0.5)), "commit-p50-ms")
	b.ReportMetric(ms(durationQuantile(sum.BackfillCommits, 0.99)), "commit-p99-ms")
	b.ReportMetric(ms(durationQuantile(sum.LoadCommits, 0.5)), "load-commit-p50-ms")
	b.ReportMetric(ms(durationQuantile(sum.LoadCommits, 0.99)), "load-commit-p99-ms")
	b.ReportMetric(float64(probe.ssts), "ssts")
	b.ReportMetric(float64(probe.l0), "l0-sublevels")
	b.ReportMetric(float64(max(maxL0, probe.l0)), "max-l0-sublevels")
	b.ReportMetric(float64(sum.Backfill.Nanoseconds()), "ns/op")
}

// reportSolo runs the solo child and reports what it measured. The child
// loads hashed pks with no churn: it stands for the uniform workload of
// the default shape only.
func reportSolo(b *testing.B, rows int, name string, order backfill.SnapshotOrder) {
	if name != "uniform" || *scaleShape != "" {
		return
	}
	profile := ""
	if *scaleSoloProf != "" {
		profile = filepath.Join(*scaleSoloProf, fmt.Sprintf("solo-%s-%s.pprof", sizeName(rows), order))
	}
	report := func(prefix string, r soloResult) {
		b.Logf("rows=%d %s child: %+v", rows, strings.TrimSuffix(prefix, "-"), r)
		b.ReportMetric(r.PeakRSS/1e6, prefix+"peak-rss-MB")
		b.ReportMetric(r.Cache/1e6, prefix+"cache-MB")
		b.ReportMetric(r.MemTable/1e6, prefix+"memtable-MB")
		b.ReportMetric(r.Beyond()/1e6, prefix+"beyond-caches-MB")
		b.ReportMetric(r.HeapSys/1e6, prefix+"go-heap-MB")
		b.ReportMetric(r.HeapLive/1e6, prefix+"go-live-MB")
		b.ReportMetric(r.MallocInUse/1e6, prefix+"malloc-in-use-MB")
		b.ReportMetric(r.MallocFree/1e6, prefix+"malloc-free-MB")
		perRow := func(sec float64) float64 { return sec * 1e9 / float64(rows) }
		b.ReportMetric(perRow(r.Load), prefix+"load-ns/row")
		b.ReportMetric(perRow(r.LoadCPU), prefix+"load-cpu-ns/row")
		b.ReportMetric(perRow(r.Backfill), prefix+"backfill-ns/row")
		b.ReportMetric(perRow(r.BackfillCPU), prefix+"backfill-cpu-ns/row")
		b.ReportMetric(perRow(r.Settle), prefix+"settle-ns/row")
		b.ReportMetric(float64(r.SettleLSM.Compacted)/1e6, prefix+"settle-compacted-MB")
	}
	store := runSolo(b, false, rows, order, profile)
	report("solo-", store)
	if *scaleSoloRaw {
		raw := runSolo(b, true, rows, order, "")
		report("solo-raw-", raw)
		// The whole job beside raw Pebble's: load, backfill and the
		// compactions both left behind (soloResult.Settle).
		total := func(r soloResult) float64 { return r.Load + r.Backfill + r.Settle }
		b.ReportMetric(total(raw)/total(store), "solo-total-x-of-raw")
	}
}

// scaleProbe is what probeStore measured on a finished store.
type scaleProbe struct {
	statsHeap, payload, readerPayload float64
	physicalHeap, liveHeap            float64
	liveRows                          int
	liveLoad                          time.Duration
	keys                              uint64
	refreshPerFile, listing           float64
	ssts, l0                          int
	cache                             float64
}

// probeStore measures the finished store (its job done, before it
// closes).
func probeStore(b *testing.B, s *Session, cfg Config) scaleProbe {
	var p scaleProbe
	db := lsminternal.DB(s.Store)
	m := db.Metrics()
	p.l0 = int(m.Levels[0].Sublevels)
	p.cache = float64(m.BlockCache.Size)
	for _, l := range m.Levels {
		p.ssts += int(l.TablesCount)
	}
	ropts := cfg.Store.PebbleOptions().MakeReaderOptions()
	tcfg := ssttracker.TrackerConfig{DB: db, Dir: lsminternal.PebbleDir(s.Store), ReaderOptions: ropts, Logger: lsm.QuietLogger(nil)}
	h := measureStatsHeap(b, s.Store)
	p.physicalHeap, p.liveHeap, p.statsHeap = h.physical, h.live, h.physical+h.live
	p.liveRows, p.keys, p.liveLoad = h.liveRows, h.keys, h.liveLoad

	p.payload, p.readerPayload = readerPayload(b, db, lsminternal.PebbleDir(s.Store), ropts)
	p.refreshPerFile, p.listing = refreshProbe(b, s.Store, tcfg)
	return p
}

// statsHeap is what measureStatsHeap measured.
type statsHeap struct {
	// physical and live are the heap bytes of the physical and the live
	// statistics.
	physical, live float64
	// liveRows are the live statistics' metadata rows; keys the MVCC
	// entries the physical statistics count.
	liveRows int
	keys     uint64
	// load is the time of the first recomputation of the physical
	// statistics: reading every live SST's, as a reopened store does;
	// liveLoad that of the first load of the live statistics from their
	// rows, read before (bucket rows, then the delta log replayed).
	load, liveLoad time.Duration
}

// measureStatsHeap returns the heap that the statistics of a finished
// store hold: a physical Version recomputed from its live SSTs by its own
// tracker's configuration (on an object store, read from the bucket), and
// the live buckets loaded from their metadata rows, as the store holds
// them (the stats package's memory benchmark does the same). The store's
// background work allocates and frees meanwhile: it waits for Pebble's
// compactions to finish and builds statsCopies copies of each, to divide
// that noise.
func measureStatsHeap(b *testing.B, store *lsm.Store) statsHeap {
	var h statsHeap
	db := lsminternal.DB(store)
	tcfg := lsminternal.StoreTracker(store).Config()
	quiesce(db)
	var entries [][2][]byte
	for _, span := range livebuckets.Spans() {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: span[0], UpperBound: span[1]})
		require.NoError(b, err)
		for ok := it.First(); ok; ok = it.Next() {
			entries = append(entries, [2][]byte{slices.Clone(it.Key()), slices.Clone(it.Value())})
		}
		require.NoError(b, it.Close())
	}
	const statsCopies = 4
	var kept []any
	before := heapLive()
	for i := range statsCopies {
		start := time.Now()
		v, err := ssttracker.Recompute(tcfg)
		require.NoError(b, err)
		if i == 0 {
			h.load = time.Since(start)
		}
		kept = append(kept, v)
		if h.keys == 0 {
			for _, t := range v.Tables() {
				c, _ := v.Table(t)
				h.keys += c.Entries
			}
		}
	}
	mid := heapLive()
	for i := range statsCopies {
		start := time.Now()
		ls := livebuckets.NewState()
		for _, def := range store.Tables() {
			ls.AddTable(def.ID, def.VnodeCount)
		}
		for _, kv := range entries {
			require.NoError(b, ls.Load(kv[0], kv[1]))
		}
		ls.FinishLoad()
		if i == 0 {
			h.liveLoad = time.Since(start)
		}
		kept = append(kept, ls)
	}
	h.physical = (mid - before) / statsCopies
	h.live = (heapLive() - mid) / statsCopies
	h.liveRows = len(entries)
	runtime.KeepAlive(kept)
	runtime.KeepAlive(entries)
	return h
}

// readerPayload opens every live SST as Pebble's file cache does
// (sstable.NewReader with the DB's reader options) and returns the
// statistics payload of the SSTs and the heap that the open readers hold
// for it: the heap freed when the payload leaves each reader's
// UserProperties.
func readerPayload(b *testing.B, db *pebble.DB, dir string, ropts sstable.ReaderOptions) (payload, held float64) {
	levels, err := db.SSTables()
	require.NoError(b, err)
	var readers []*sstable.Reader
	seen := map[uint64]bool{}
	for _, l := range levels {
		for _, t := range l {
			n := uint64(t.BackingSSTNum)
			if seen[n] {
				continue
			}
			seen[n] = true
			f, err := vfs.Default.Open(vfs.Default.PathJoin(dir, fmt.Sprintf("%06d.sst", n)))
			if oserror.IsNotExist(err) {
				continue // compacted away since the listing
			}
			require.NoError(b, err)
			readable, err := sstable.NewSimpleReadable(f)
			require.NoError(b, err)
			r, err := sstable.NewReader(context.Background(), readable, ropts)
			require.NoError(b, err)
			readers = append(readers, r)
		}
	}
	for _, r := range readers {
		payload += float64(len(r.UserProperties[sstsummary.CollectorName]))
	}
	withProps := heapLive()
	for _, r := range readers {
		delete(r.UserProperties, sstsummary.CollectorName)
	}
	held = withProps - heapLive()
	for _, r := range readers {
		_ = r.Close()
	}
	return payload, held
}

// refreshProbe times statistics refreshes of the store's own tracker, which
// follows the changes Pebble's events report: each round writes 20 keys of
// a scratch table (no table of the catalog) and flushes (one new file),
// then compacts that range (its files out, one in), and after each step
// takes the tracker's refresh time and changed files since the step
// before (RefreshSignalled first, so that every change of the step is in:
// the refreshes of the store's goroutine count too). It returns the median
// over the steps of refresh time per changed file, and the time of a
// listing of the live SSTs (O(files), what a refresh does when the changes
// do not add up), timed by a tracker of its own with nothing changed.
//
// The probe first flushes what the job left in the memtable and waits for
// Pebble's compactions to settle, so that the files it times are its own.
// The scratch table is table 0, below every table of the catalog: no file
// of the store spans its keys, and its compactions rewrite only its own
// files. (A scratch table between the catalog and the metadata table would
// share a bottom-level file with the last table's data and the metadata,
// and time that file's rewrite, which grows with the table.)
func refreshProbe(b *testing.B, store *lsm.Store, cfg ssttracker.TrackerConfig) (perFile, listing float64) {
	db := lsminternal.DB(store)
	tr := lsminternal.StoreTracker(store)
	require.NoError(b, db.Flush())
	quiesce(db)
	require.NoError(b, tr.RefreshSignalled())
	const scratch, rounds = 0, 48
	val := bytes.Repeat([]byte{7}, 100)
	var per []float64
	last := tr.RefreshCounts()
	step := func() {
		require.NoError(b, tr.RefreshSignalled())
		now := tr.RefreshCounts()
		if changed := now.ChangedFiles - last.ChangedFiles; changed > 0 {
			per = append(per, float64((now.Time-last.Time).Nanoseconds())/float64(changed))
		}
		last = now
	}
	for round := range rounds {
		vnode := uint16(round % 4)
		batch := db.NewBatch()
		for pk := range 20 {
			k := keys.AppendVersioned(nil, scratch, vnode, keys.AppendUint64(nil, uint64(pk*7+round)), keys.MakeVersion(1, 0), keys.KindPut)
			require.NoError(b, batch.Set(k, val, nil))
		}
		require.NoError(b, batch.Commit(pebble.NoSync))
		require.NoError(b, db.Flush())
		step()
		lo, hi := keys.VnodeSpan(scratch, vnode)
		require.NoError(b, db.Compact(context.Background(), lo, hi, false))
		step()
	}
	require.NotEmpty(b, per, "no refresh saw a changed file")

	// The listing, by refreshes of a tracker of its own that find nothing
	// changed, after Pebble's compactions (the probe's own can start
	// others, as churn leaves the LSM in need of them) have settled.
	// Medians: a listing takes 0.1 ms, and one GC pause or page fault in a
	// process of gigabytes would be most of a mean.
	quiesce(db)
	lt := ssttracker.NewTracker(cfg)
	require.NoError(b, lt.Refresh())
	var idle []float64
	for range 32 {
		before := lt.Current()
		start := time.Now()
		require.NoError(b, lt.Refresh())
		if took := time.Since(start); lt.Current() == before {
			idle = append(idle, float64(took.Nanoseconds()))
		}
	}
	require.NoError(b, lt.Close())
	require.NotEmpty(b, idle, "every idle refresh saw a changed file")
	return testutil.Median(per), testutil.Median(idle)
}

// quiesce waits (up to a minute) until Pebble runs no compaction.
func quiesce(db *pebble.DB) { settle(compactionsRunning(db), soloSettlePoll, time.Minute) }

// heapLive returns the live heap after two collections.
func heapLive() float64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

// resetPeakRSS returns the memory the process holds (RSS) after returning
// what it can to the OS (the Go heap's free pages and malloc's free
// memory: the pipeline that runs second would otherwise fill its block
// cache from the pages the first one freed, and skip the page faults the
// first one paid), and resets the kernel's peak RSS to it (Linux;
// elsewhere the peak stays the process's).
func resetPeakRSS() float64 {
	debug.FreeOSMemory()
	malloc.Trim()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	return procStatus("VmRSS:")
}

// peakRSS returns the peak RSS since the last reset (VmHWM), or 0 where
// /proc is missing.
func peakRSS() float64 { return procStatus("VmHWM:") }

func procStatus(field string) float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// quantile returns the q-quantile of ds (nearest rank), 0 for none.
func durationQuantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// parseSizes parses "1M,4M,200k,5000".
func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mult := 1
		switch {
		case strings.HasSuffix(f, "M"):
			mult, f = 1_000_000, strings.TrimSuffix(f, "M")
		case strings.HasSuffix(f, "k"):
			mult, f = 1_000, strings.TrimSuffix(f, "k")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("bench: bad size %q in -scale-rows", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// sizeName is the inverse of parseSizes for one size.
func sizeName(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	}
	return strconv.Itoa(n)
}
