package bench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/malloc"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// The solo run measures the memory of a process that holds a store and a
// backfill job and nothing else, as a user's service would.
//
// BenchmarkScale's own peak RSS cannot show it: that process also holds
// the workload model (harness-MB, about 58 bytes per row, and as much again
// of garbage before Go's collector runs), and memory earlier runs of the
// same process freed but the allocators kept. So scaleRun starts the test
// binary again as a child (soloEnv names what to run; TestMain hands over
// to soloChild) which, using the store and the job through their public
// API (and Pebble's metrics, for the cache and memtable sizes):
//
//  1. runs with glibc's malloc limited to one arena as the CLI does (the
//     test binary imports package malloc; a MALLOC_ARENA_MAX in the
//     environment wins) and opens a store with the default options (the
//     block cache an eighth of the machine's memory, or -scale-solo-cache);
//  2. loads the rows with its own unchecked writer, 20,000 rows per
//     committed epoch: hashed unique pks of two uint64 columns, 100-byte
//     rows, generated from the row's id and kept nowhere;
//  3. backfills an MV with the job of BenchmarkScale's configuration (2
//     actors, 256-row chunks, 2,048 rows per actor per checkpoint, the
//     stats estimator) over a source with no changes;
//  4. compares the MV with the upstream (Job.Compare), which reads both
//     tables once more through the block cache: it fills to its capacity
//     and evicts, the allocator's steady state;
//  5. prints one JSON line (soloResult): its peak RSS (VmHWM), the largest
//     block cache (its blocks, and its maps and entries, as Pebble's
//     metrics count them) and memtables Pebble reported (every 16th
//     checkpoint and at the end), its Go heap (what the runtime kept from the OS, and what
//     was live at the end), what malloc held at the end (in use, and free
//     but kept) and the wall and CPU times of the load and of the backfill
//     (from opening the job to its end).
//
// The per-row times are the store's own, without the harness: in
// BenchmarkScale's process the workload model is live heap that every
// garbage collection marks, so the cost per row there grows with the
// table for the harness's sake (raw Pebble's too).
//
// What it holds beyond the block cache and the memtables should not grow
// with the table: that is the issue's "peak RSS flat in table size beyond
// the configured caches and memtables".
//
// A raw child (raw=true) does the same on raw Pebble, in a database opened
// with the store's Pebble options (the same cache and memtables): the
// same load, one synced batch per 20,000 rows; the raw pipeline's scan
// (raw.go), one synced batch per checkpoint's worth of rows (2 × 2,048),
// in key order or interleaved as the store's child; and the raw
// pipeline's comparison. Its memory beyond the caches, and its cost per
// row, are the yardstick of the store's: what an LSM holding the same
// rows needs anyway.
const soloEnv = "LSMSTATS_BENCH_SOLO"

// soloResult is what a solo child measured, in bytes.
type soloResult struct {
	PeakRSS float64 `json:"peak_rss"`
	// Cache is the block cache's memory as Pebble counts it: the cached
	// blocks and the cache's own hash maps and entries (CacheMeta of it).
	Cache     float64 `json:"cache"`
	CacheMeta float64 `json:"cache_meta"`
	MemTable  float64 `json:"memtable"`
	HeapSys   float64 `json:"heap_sys"`
	HeapLive  float64 `json:"heap_live"`
	Rows      uint64  `json:"rows"`
	// Load and Backfill are the phases' wall times, and LoadCPU and
	// BackfillCPU their process CPU times, in seconds.
	Load        float64 `json:"load_s"`
	Backfill    float64 `json:"backfill_s"`
	LoadCPU     float64 `json:"load_cpu_s"`
	BackfillCPU float64 `json:"backfill_cpu_s"`
	// ArenasLimited says glibc's malloc had one arena (package malloc).
	ArenasLimited bool `json:"arenas_limited"`
	// MallocInUse and MallocFree are what malloc held at the end, after
	// the comparison (malloc.ReadStats; 0 where it cannot say): the live
	// C allocations (Pebble's block cache and memtables, the cache's
	// entries, its other manual memory) and the free memory it kept.
	MallocInUse float64 `json:"malloc_in_use"`
	MallocFree  float64 `json:"malloc_free"`
	// LoadLSM and BackfillLSM are the bytes Pebble wrote in each phase.
	LoadLSM     LSMWrites `json:"load_lsm"`
	BackfillLSM LSMWrites `json:"backfill_lsm"`
	// Settle is the wall time, in seconds, from the backfill's end to the
	// end of the last compaction Pebble ran before it started no more
	// (settle), and SettleLSM what those compactions wrote: the work the
	// load and the backfill left behind, which the phases' times leave
	// out. A store that defers more of it looks faster in them.
	Settle    float64   `json:"settle_s"`
	SettleLSM LSMWrites `json:"settle_lsm"`
}

// Beyond is the peak RSS beyond the block cache (with its maps and
// entries) and the memtables.
func (r soloResult) Beyond() float64 { return r.PeakRSS - r.Cache - r.MemTable }

// soloSpec is what the parent asks of a child: rows=N,order=O,cache=B,dir=D
// (a cache of 0 bytes is the store's default), and optionally profile=P: a
// CPU profile of the backfill (the job, from open to end) written to P. To
// profile by hand, run the test binary with the variable set, e.g.
//
//	LSMSTATS_BENCH_SOLO=rows=1000000,order=vnode,cache=0,dir=/tmp/s,profile=/tmp/p ./bench.test
type soloSpec struct {
	raw     bool
	budget  int // the store's Options.StatsBucketBudget
	rows    int
	order   backfill.SnapshotOrder
	cache   int64
	dir     string
	profile string
}

func (s soloSpec) String() string {
	v := fmt.Sprintf("rows=%d,order=%s,cache=%d,dir=%s", s.rows, s.order, s.cache, s.dir)
	if s.profile != "" {
		v += ",profile=" + s.profile
	}
	if s.raw {
		v += ",raw=true"
	}
	if s.budget != 0 {
		v += ",budget=" + strconv.Itoa(s.budget)
	}
	return v
}

func parseSoloSpec(v string) (soloSpec, error) {
	var s soloSpec
	for _, f := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(f, "=")
		var err error
		switch k {
		case "rows":
			s.rows, err = strconv.Atoi(val)
		case "order":
			s.order, err = backfill.ParseSnapshotOrder(val)
		case "cache":
			s.cache, err = strconv.ParseInt(val, 10, 64)
		case "dir":
			s.dir = val
		case "profile":
			s.profile = val
		case "raw":
			s.raw, err = strconv.ParseBool(val)
		case "budget":
			s.budget, err = strconv.Atoi(val)
		default:
			err = errors.Newf("unknown field %q", k)
		}
		if err != nil {
			return s, errors.Wrapf(err, "%s=%q", soloEnv, v)
		}
	}
	if s.rows <= 0 || s.cache < 0 || s.budget < 0 || s.dir == "" {
		return s, errors.Newf("%s=%q: want rows=N,order=O,cache=B,dir=D", soloEnv, v)
	}
	return s, nil
}

// runSolo runs a solo child (a raw-Pebble one if raw) and returns what it
// measured. profile, if not empty, is where the child writes a CPU profile
// of its backfill.
func runSolo(b testing.TB, raw bool, rows int, order backfill.SnapshotOrder, profile string) soloResult {
	spec := soloSpec{raw: raw, budget: *scaleBudget, rows: rows, order: order, cache: *scaleSoloCache, dir: b.TempDir(), profile: profile}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), soloEnv+"="+spec.String())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(b, err, "solo child %s: %s", spec, stderr.String())
	var r soloResult
	require.NoError(b, json.Unmarshal(out, &r), "solo child %s printed %q", spec, out)
	require.Equal(b, uint64(rows), r.Rows, "solo child %s: MV rows", spec)
	return r
}

// soloChild is the child's whole life: it returns the process's exit code.
func soloChild(v string) int {
	spec, err := parseSoloSpec(v)
	if err == nil {
		run := solo
		if spec.raw {
			run = soloRaw
		}
		var r soloResult
		if r, err = run(spec); err == nil {
			err = json.NewEncoder(os.Stdout).Encode(r)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "solo: %+v\n", err)
		return 1
	}
	return 0
}

func solo(spec soloSpec) (res soloResult, err error) {
	s, err := lsm.Open(spec.dir, &lsm.Options{Logger: lsm.QuietLogger(nil), CacheSize: spec.cache, StatsBucketBudget: spec.budget})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.CombineErrors(err, s.Close()) }()
	res.ArenasLimited = malloc.ArenasLimited()
	sample := func() {
		if m, err := s.PebbleMetrics(); err == nil { // the store is open
			res.sample(m)
		}
	}

	// The uniform workload's table and pks (seed 7, as scaleConfig's).
	const seed = 7
	def := workload.Params{VnodeCount: 256}.TableDef(UpstreamTable)
	if err := s.CreateTable(def); err != nil {
		return res, err
	}
	w, err := s.NewWriter(def.ID, nil, &lsm.WriterOptions{Unchecked: true})
	if err != nil {
		return res, err
	}
	const batch = 20000
	row := make([]byte, 100)
	lsm0, err := storeWrites(s)
	if err != nil {
		return res, err
	}
	start, cpu := time.Now(), processCPU()
	epoch := s.EpochFloor()
	for lo := 0; lo < spec.rows; lo += batch {
		epoch++
		for id := uint64(lo); id < uint64(min(lo+batch, spec.rows)); id++ {
			binary.LittleEndian.PutUint64(row, id)
			pk := workload.HashedPK(id, seed)
			if err := w.Insert(epoch, def.VnodeOf(pk), pk, row); err != nil {
				return res, err
			}
		}
		if err := w.Seal(epoch); err != nil {
			return res, err
		}
		if err := s.Commit(epoch); err != nil {
			return res, err
		}
	}
	if err := w.Close(); err != nil {
		return res, err
	}

	res.Load, res.LoadCPU = time.Since(start).Seconds(), (processCPU() - cpu).Seconds()
	lsm1, err := storeWrites(s)
	if err != nil {
		return res, err
	}
	res.LoadLSM = lsm1.Sub(lsm0)
	// The profile covers the backfill only: stopped right after it, or by
	// the deferred call if the job fails first.
	stopProfile, err := startProfile(spec.profile)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.CombineErrors(err, stopProfile()) }()
	start, cpu = time.Now(), processCPU()
	checkpoints := 0
	j, err := backfill.OpenJob(backfill.JobConfig{
		Store: s, Upstream: def, MV: MVTable, State: StateTable, Meta: MetaTable,
		Actors: 2, ChunkSize: 256, BarrierRows: 2048, SnapshotOrder: spec.order,
		Estimators: []backfill.Estimator{backfill.StatsEstimator{}},
		Source:     &quietSource{},
		OnCheckpoint: func(backfill.Record) {
			if checkpoints++; checkpoints%16 == 0 {
				sample()
			}
		},
	})
	if err != nil {
		return res, err
	}
	defer func() { err = errors.CombineErrors(err, j.Close()) }()
	if _, err := j.Run(context.Background()); err != nil {
		return res, err
	}
	res.Backfill, res.BackfillCPU = time.Since(start).Seconds(), (processCPU() - cpu).Seconds()
	lsm2, err := storeWrites(s)
	if err != nil {
		return res, err
	}
	res.BackfillLSM = lsm2.Sub(lsm1)
	if err := stopProfile(); err != nil {
		return res, err
	}
	res.Settle = settle(compactionsRunning(lsminternal.DB(s)), soloSettlePoll, soloSettleMax).Seconds()
	lsm3, err := storeWrites(s)
	if err != nil {
		return res, err
	}
	res.SettleLSM = lsm3.Sub(lsm2)
	rec, ok := j.Progress()
	if !ok || !rec.Finished {
		return res, errors.New("the job stopped unfinished")
	}
	res.Rows = rec.SnapshotRows
	// The comparison reads both tables once more, through the block cache,
	// which fills to its capacity and evicts: the allocator's steady state.
	if err := j.Compare(); err != nil {
		return res, err
	}
	sample()
	res.finish()
	return res, nil
}

// soloRaw is solo on raw Pebble (see soloEnv).
func soloRaw(spec soloSpec) (res soloResult, err error) {
	db, err := pebble.Open(spec.dir, (&lsm.Options{Logger: lsm.QuietLogger(nil), CacheSize: spec.cache}).PebbleOptions())
	if err != nil {
		return res, err
	}
	defer func() { err = errors.CombineErrors(err, db.Close()) }()
	res.ArenasLimited = malloc.ArenasLimited()

	const seed = 7
	def := workload.Params{VnodeCount: 256}.TableDef(UpstreamTable)
	const batch = 20000
	row := make([]byte, 100)
	var key []byte
	r := &rawRun{db: db}
	lsm0 := lsmWrites(db.Metrics())
	start, cpu := time.Now(), processCPU()
	for lo := 0; lo < spec.rows; lo += batch {
		r.epoch++
		b := db.NewBatch()
		for id := uint64(lo); id < uint64(min(lo+batch, spec.rows)); id++ {
			binary.LittleEndian.PutUint64(row, id)
			pk := workload.HashedPK(id, seed)
			key = keys.AppendVersioned(key[:0], UpstreamTable, def.VnodeOf(pk), pk, keys.MakeVersion(r.epoch, 0), keys.KindPut)
			if err := b.Set(key, row, nil); err != nil {
				return res, err
			}
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return res, err
		}
		_ = b.Close()
	}
	res.Load, res.LoadCPU = time.Since(start).Seconds(), (processCPU() - cpu).Seconds()
	lsm1 := lsmWrites(db.Metrics())
	res.LoadLSM = lsm1.Sub(lsm0)

	stopProfile, err := startProfile(spec.profile)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.CombineErrors(err, stopProfile()) }()
	scan := r.scan
	if spec.order == backfill.Interleaved {
		r.cursors, r.finished = make([][]byte, def.VnodeCount), make([]bool, def.VnodeCount)
		scan = r.scanInterleaved
	}
	start, cpu = time.Now(), processCPU()
	for commits, done := 0, false; !done; commits++ {
		r.epoch++
		b := db.NewBatch()
		n, finished, err := scan(b, 2*2048)
		if err != nil {
			return res, err
		}
		res.Rows += uint64(n)
		if err := b.Commit(pebble.Sync); err != nil {
			return res, err
		}
		_ = b.Close()
		if done = finished; commits%16 == 15 {
			res.sample(db.Metrics())
		}
	}
	res.Backfill, res.BackfillCPU = time.Since(start).Seconds(), (processCPU() - cpu).Seconds()
	lsm2 := lsmWrites(db.Metrics())
	res.BackfillLSM = lsm2.Sub(lsm1)
	if err := stopProfile(); err != nil {
		return res, err
	}
	res.Settle = settle(compactionsRunning(db), soloSettlePoll, soloSettleMax).Seconds()
	res.SettleLSM = lsmWrites(db.Metrics()).Sub(lsm2)
	if err := r.compare(); err != nil {
		return res, err
	}
	res.sample(db.Metrics())
	res.finish()
	return res, nil
}

// How settle polls in the solo children (and quiesce): every 10 ms, until
// 20 polls in a row (200 ms) see no compaction; the children wait at most
// ten minutes.
const (
	soloSettlePoll = 10 * time.Millisecond
	soloSettleMax  = 10 * time.Minute
)

// compactionsRunning returns the number of compactions db runs now, for
// settle.
func compactionsRunning(db *pebble.DB) func() int64 {
	return func() int64 { return db.Metrics().Compact.NumInProgress }
}

// settle waits until running (the number of compactions in progress) reads
// 0 at 20 polls in a row, poll apart, or until limit has passed, and returns
// how long after its call running last read above 0: 0 if it never did.
// The quiet polls at the end are not counted, so a store that runs no
// compaction settles in 0.
func settle(running func() int64, poll, limit time.Duration) time.Duration {
	start := time.Now()
	last := start
	for quiet := 0; quiet < 20 && time.Since(start) < limit; time.Sleep(poll) {
		if running() > 0 {
			quiet, last = 0, time.Now()
		} else {
			quiet++
		}
	}
	return last.Sub(start)
}

// sample keeps the largest block cache (with its maps and entries) and
// memtables db reports.
func (r *soloResult) sample(m *pebble.Metrics) {
	meta := cacheMeta(m)
	if c := float64(m.BlockCache.Size) + meta; c > r.Cache {
		r.Cache, r.CacheMeta = c, meta
	}
	r.MemTable = max(r.MemTable, float64(m.MemTable.Size))
}

// finish reads what the process holds at the end: malloc's memory, the Go
// heap and the peak RSS.
func (r *soloResult) finish() {
	if st, ok := malloc.ReadStats(); ok {
		r.MallocInUse, r.MallocFree = float64(st.InUse), float64(st.Free)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapSys = float64(ms.HeapSys - ms.HeapReleased)
	r.PeakRSS = peakRSS()
	r.HeapLive = heapLive()
}

// startProfile starts a CPU profile into path (none if empty) and returns
// its stop, which may be called more than once.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return sync.OnceValue(func() error { pprof.StopCPUProfile(); return f.Close() }), nil
}

// cacheMetaRE matches the cache's maps and entries in the "Cgo memory
// usage" line of Pebble's metrics, the only place Pebble shows them.
var cacheMetaRE = regexp.MustCompile(`block cache: [^(]*\(data: [^,]*, maps: ([0-9.]+)([KMGTPE]?B), entries: ([0-9.]+)([KMGTPE]?B)\)`)

// cacheMeta returns the bytes of the block cache's hash maps and entries:
// C memory Pebble allocates beside the cached blocks, about 150 bytes per
// block, which BlockCache.Size leaves out. It is read from Metrics' text,
// to two or three digits; 0 when the text has no such line.
func cacheMeta(m *pebble.Metrics) float64 {
	g := cacheMetaRE.FindStringSubmatch(m.String())
	if g == nil {
		return 0
	}
	return parseHumanBytes(g[1], g[2]) + parseHumanBytes(g[3], g[4])
}

// parseHumanBytes parses Pebble's humanized sizes: "66MB" is 66 MiB.
func parseHumanBytes(num, unit string) float64 {
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0
	}
	return v * math.Pow(1024, float64(strings.Index("BKMGTPE", unit[:1])))
}

// quietSource is an upstream that changes nothing: the table was loaded
// before the job.
type quietSource struct{ step uint64 }

func (q *quietSource) Resume(at backfill.Position) error { q.step = at.Step; return nil }
func (q *quietSource) Step() uint64                      { return q.step }
func (q *quietSource) BackfillStep() uint64              { return 1 }
func (q *quietSource) Finished(uint64)                   {}
func (q *quietSource) Next(context.Context) ([]backfill.RowOp, error) {
	q.step++
	return nil, nil
}

// TestSoloChild runs a small solo child of each kind: it finishes the
// backfill, and its figures are those of a process that did (a cache and
// memtables in use, a peak RSS above them, one arena on this platform).
// The raw child's 20,000 rows never leave its memtable, so its cache holds
// only the cache's own maps; the store's child commits SSTs and reads them.
func TestSoloChild(t *testing.T) {
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw=%t", raw), func(t *testing.T) { testSoloChild(t, raw) })
	}
}

func testSoloChild(t *testing.T, raw bool) {
	profile := filepath.Join(t.TempDir(), "backfill.pprof")
	r := runSolo(t, raw, 20000, backfill.Interleaved, profile)
	require.Positive(t, r.Cache, "block cache")
	require.Positive(t, r.CacheMeta, "the cache's maps and entries, from Pebble's metrics text")
	if !raw {
		require.Less(t, r.CacheMeta, r.Cache/2, "the cache's maps and entries")
	}
	require.Positive(t, r.MemTable, "memtables")
	require.Greater(t, r.PeakRSS, r.Cache+r.MemTable/4, "peak RSS")
	require.Positive(t, r.HeapLive)
	require.Positive(t, r.Load)
	require.Positive(t, r.BackfillCPU)
	require.GreaterOrEqual(t, r.Settle, 0.0)
	require.Less(t, r.Settle, soloSettleMax.Seconds(), "the settle ran to its limit")
	require.Equal(t, malloc.ArenasLimited(), r.ArenasLimited, "the child's arenas, as this process's")
	// The profile of the backfill: a gzipped protobuf, as runtime/pprof
	// writes them.
	b, err := os.ReadFile(profile)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "gzip magic of %s", profile)
}

// TestSettle: settle counts up to the last poll that saw a compaction
// running, not the quiet polls after it, and gives up at its limit.
func TestSettle(t *testing.T) {
	const poll = time.Millisecond
	polls := 0
	busy := func(n int) func() int64 {
		return func() int64 {
			if polls++; polls <= n {
				return 1
			}
			return 0
		}
	}
	require.Zero(t, settle(busy(0), poll, time.Minute), "no compaction ran")
	require.Equal(t, 20, polls, "polls of an idle store")

	polls = 0
	start := time.Now()
	d := settle(busy(30), poll, time.Minute)
	total := time.Since(start)
	require.Equal(t, 50, polls, "30 busy polls, then 20 quiet ones")
	require.GreaterOrEqual(t, d, 29*poll, "the 30 busy polls")
	// Each quiet poll is followed by a sleep of a poll at least.
	require.GreaterOrEqual(t, total-d, 20*poll, "quiet polls counted (%v of %v)", d, total)

	polls = 0
	start = time.Now()
	d = settle(busy(math.MaxInt), poll, 50*time.Millisecond)
	require.Less(t, time.Since(start), 10*time.Second, "settle passed its limit")
	require.GreaterOrEqual(t, d, 40*time.Millisecond, "busy to the limit")
}

// TestSoloSpec: the child refuses a spec it cannot run, naming it.
func TestSoloSpec(t *testing.T) {
	for _, bad := range []string{"", "rows=10", "rows=x,dir=/d", "rows=10,order=sideways,dir=/d", "rows=10,cache=-1,dir=/d", "rows=10,dir=/d,colour=red", "rows=10,dir=/d,raw=maybe", "rows=10,dir=/d,budget=-1"} {
		_, err := parseSoloSpec(bad)
		require.ErrorContains(t, err, soloEnv, "spec %q", bad)
	}
	want := soloSpec{raw: true, budget: 1024, rows: 10, order: backfill.Interleaved, cache: 1 << 20, dir: "/d", profile: "/p"}
	got, err := parseSoloSpec(want.String())
	require.NoError(t, err)
	require.Equal(t, want, got)
}
