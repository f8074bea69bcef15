package lsm

import (
	"runtime"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/lsminternal"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/objstore"
)

// Options configures a Store. A nil *Options is valid and means the defaults.
type Options struct {
	// FS is the file system of the store; nil means vfs.Default. Tests pass
	// Pebble's errorfs to inject faults.
	FS vfs.FS

	// MemoryWatermark is the total size of all writers' buffers above which
	// the sync manager spills the largest buffers to staged SSTs, until the
	// total is below half of it. Zero means 64 MiB; negative disables spills.
	// Besides its buffers, a writer keeps those of its last committed epoch
	// for its next one (its entries and at most 4 MiB of arena), which the
	// watermark does not count.
	MemoryWatermark int64

	// TargetFileSize is the size at which the SSTs a commit writes are cut.
	// Zero means 16 MiB.
	TargetFileSize int64

	// PartitionBytes: once a table's live bytes (its live statistics)
	// reach this, its SSTs, Pebble's flushes and compactions and the
	// store's own, are cut at its 16 vnode partitions as well as at its
	// ends, so that writes in vnode order (a backfill's actors) make SSTs
	// that overlap nothing and move down the levels unrewritten. Smaller
	// tables are cut at their ends only, so that many small tables do not
	// make every flush hundreds of tiny files. Zero means 32 MiB, 2 MiB
	// (Pebble's L0 target file size) a partition; negative never
	// partitions. See sstSpans in spans.go.
	PartitionBytes int64

	// CommitBatchBytes: a checkpoint without spilled pieces whose buffers
	// hold fewer bytes than this is committed as one synced Pebble batch,
	// through the WAL and the memtable, so that many small checkpoints reach
	// L0 as one flushed SST; a larger one is written into SSTs and ingested.
	// Both are atomic. Zero means a quarter of Pebble's MemTableSize: Pebble
	// makes a batch whose memtable footprint (its bytes plus a skiplist
	// node per key) reaches about half of it a memtable of its own and
	// flushes it at once, which costs the WAL write and the flush of an
	// ingestion both; Commit then waits for that flush. Negative ingests
	// every checkpoint.
	CommitBatchBytes int64

	// CacheSize is the size of Pebble's block cache, shared by reads, the
	// checks of checked writers and compactions. Zero means an eighth of
	// the machine's memory, at least 32 MiB (256 MiB where the memory
	// cannot be read): like RisingWave, which gives its block cache a fixed
	// share of the node's memory. The cache grows to its size as blocks are
	// read; it does not take the memory up front.
	CacheSize int64

	// StatsBucketBudget bounds each table's live statistics whatever its
	// rows: a bucket (the exact live rows and bytes of a pk range of a
	// vnode) may hold 1/StatsBucketBudget of its table's rows, so a table
	// keeps fewer than 8·StatsBucketBudget + vnodes buckets whatever its
	// rows, each about 64 bytes plus its pk in memory and one metadata
	// row. The budget binds when it is below the table's vnodes times
	// stats.SplitDivisor (16,384 for 256 vnodes; up to four times that,
	// at most 16,384, in a table of fewer vnodes, whose buckets split
	// finer); above that the buckets follow the vnodes (at most about 1.6%
	// of a vnode each). A smaller
	// budget widens EstimateRows' bounds, which span the two buckets that
	// hold a range's ends, and the progress estimate's. The accuracy
	// matrix's goals held with budgets of 256 and 1,024; with 64, whose
	// limit exceeded a whole vnode's rows, one cell missed them
	// (docs/design.md). It also bounds what a commit writes: the commit
	// rewrites the metadata row of each bucket it changed, and inserts at
	// random pks change about one bucket per row while a vnode has more
	// buckets than the commit has rows for it. At 4M hashed pks, a budget of
	// 4,096 took about 28% off the load's time. Zero means
	// stats.TableBucketBudget (65,536).
	StatsBucketBudget int

	// L0StopSublevels makes Commit wait for compactions while L0 has at least
	// this many sublevels. Ingestion bypasses Pebble's own write stalls (they
	// apply to memtable writes only), so without this back-pressure read
	// amplification would grow without bound under a fast checkpoint cadence.
	// The wait ends early when compactions cannot drain L0 (off, failing, or
	// none running for L0IdleLimit) and after L0StallLimit in any case, so
	// keep it well above Pebble's L0CompactionThreshold (16 in the store's
	// options). Zero means 48; negative disables the wait.
	L0StopSublevels int

	// L0StallLimit bounds one commit's (or GC batch's) wait for L0, whatever
	// compactions do meanwhile: after a failed compaction Pebble leaves its
	// inputs alone for 30 s while others may keep running elsewhere, and a
	// wait that saw them run would otherwise last until L0 drains. Zero
	// means 10 s.
	L0StallLimit time.Duration

	// L0IdleLimit ends the wait for L0 early when no compaction has run or
	// finished for this long (Pebble schedules one at once when L0 is that
	// deep, so none running means none is coming). Zero means 1 s.
	L0IdleLimit time.Duration

	// ReadOnly opens an existing store for inspection (stats, verify,
	// reads): Pebble opens read-only, and the store creates and writes
	// nothing — no directory, no staging directory, no initial metadata, no
	// pending bucket splits redone. Every write returns ErrReadOnly. A path
	// that holds no store is refused (ErrNoStore), as with MustExist.
	//
	// A read-only store also opens past metadata rows that do not decode
	// (a catalog entry, a live-statistics bucket, the garbage-collection
	// watermark) and past SSTs whose properties cannot be read: it leaves
	// them out, logs them, and Verify reports each one. The rows it cannot
	// do without (format_version, committed_epoch) still fail Open.
	ReadOnly bool

	// MustExist refuses, with ErrNoStore, a path that holds no store instead
	// of creating one there.
	MustExist bool

	// ObjectStore, if set (a URL or a Storage), keeps the store's SSTs in
	// an S3-compatible object store, as Hummock keeps its SSTs in S3
	// (objectstore.go, docs/design.md "Storage in a bucket"): Pebble
	// creates its SSTs there (the flushes and compactions of the levels
	// ObjectStore.Levels says, every ingested SST), and everything else
	// stays in the directory: the WAL, the MANIFEST, Pebble's catalog of
	// remote objects, the checkpoint mark, the MANIFEST's copy, staging.
	// The store records the object store in the directory (OBJECT-STORE)
	// and writes an identity marker into it; Open checks that the object
	// store answers (a message says whether the endpoint is unreachable,
	// the credentials are refused or the bucket is missing), refuses a
	// store created with an object store when opened without one, or with
	// another, and one created without when opened with one, and, when
	// writable, removes the store's orphaned objects (SSTs of failed
	// uploads Pebble never deletes). Each store has a creator id of its
	// own, in its objects' names: several stores share a bucket, under a
	// prefix each or one. Nil means local disk only.
	ObjectStore *objstore.StoreOptions

	// Logger receives Pebble's log lines and the store's own (its errors:
	// a failed flush at Close, corrupt data met, metadata rows a read-only
	// store left out). Nil means Pebble's default logger,
	// pebble.DefaultLogger: every line, the informational ones included
	// (each flush, compaction and ingestion), through the standard
	// library's log package to standard error. QuietLogger keeps the
	// errors only. Pebble calls Fatalf on a failed write or sync of its
	// WAL or MANIFEST and expects it not to return (its default logger
	// ends the process). It no longer does on corrupt data: the store
	// takes Pebble's DataCorruption event, logs it with Errorf and counts
	// it, and the read that met the corruption returns an error marked
	// lsmstats.ErrCorruption that names the file. The logger is called
	// from many goroutines at once. It wins over a logger that the Pebble
	// hook sets: the store sets Pebble's Logger back to this one after
	// the hook.
	Logger pebble.Logger

	// EventListener, if set, receives Pebble's events in addition to the
	// store's own listeners. Its callbacks run under Pebble's mutex.
	EventListener *pebble.EventListener

	// Pebble, if set, is called on the Pebble options after the store has set
	// its own, to tune them further. It must not change the comparer or the
	// block property collectors. A Logger it sets is replaced by
	// Options.Logger (Pebble's and the store's lines go to one logger). A
	// CompactionScheduler it sets replaces the store's, and with it the
	// store's guard against a Pebble panic on a cancelled manual compaction
	// (compactionScheduler); the hook is called once per Open, and a
	// scheduler serves one Pebble database at a time, so it should make a
	// new one on each call.
	Pebble func(*pebble.Options)

	// OnPhase, if set, is called synchronously, from the goroutine doing the
	// work, when the store enters a phase: "spilling" and back to
	// "buffering", "committing", and GC's "gc-scanning", "gc-ingesting",
	// "gc-compacting". For instrumentation and crash tests; it must be fast
	// and must not call into the store.
	OnPhase func(phase string)
}

func (o *Options) withDefaults() Options {
	var out Options
	if o != nil {
		out = *o
	}
	if out.FS == nil {
		out.FS = vfs.Default
	}
	if out.MemoryWatermark == 0 {
		out.MemoryWatermark = 64 << 20
	}
	if out.TargetFileSize <= 0 {
		out.TargetFileSize = 16 << 20
	}
	if out.PartitionBytes == 0 {
		out.PartitionBytes = 32 << 20
	}
	if out.L0StopSublevels == 0 {
		out.L0StopSublevels = 48
	}
	if out.CacheSize <= 0 {
		out.CacheSize = defaultCacheSize(machineMemory())
	}
	if out.L0StallLimit <= 0 {
		out.L0StallLimit = 10 * time.Second
	}
	if out.L0IdleLimit <= 0 {
		out.L0IdleLimit = time.Second
	}
	if out.ReadOnly {
		out.MustExist = true
	}
	return out
}

// defaultCacheSize is the block cache of a machine with mem bytes of
// memory (0: unknown).
func defaultCacheSize(mem int64) int64 {
	if mem <= 0 {
		return 256 << 20
	}
	return max(32<<20, mem/8)
}

// WriterOptions configures one Writer.
type WriterOptions struct {
	// Unchecked skips the read-before-write consistency check of each row
	// op. Ops are then trusted to describe the state they change (an Insert
	// of an absent pk, a Delete or Update of the given old row), and the live
	// statistics of the table are flagged as possibly containing estimates
	// until Store.RecomputeLiveStats recomputes them, like CockroachDB's
	// ContainsEstimates.
	Unchecked bool
}

// PebbleOptions returns the Pebble options a store opened with o (nil: the
// defaults) opens its database with, the Pebble hook applied: the store's
// comparer, the statistics' block property collector, its L0 and memtable
// settings, filters, compression and block cache size, for a comparison
// with raw Pebble doing the same work (package bench's RunRaw opens its
// database with them). They leave out what Open adds for the store itself:
// its event listeners (the statistics' tracker, Options.EventListener),
// the span policy of its large tables' vnode partitions, and its
// compaction scheduler (Pebble's default one runs). Each call returns new
// options: open one database with each.
func (o *Options) PebbleOptions() *pebble.Options {
	d := o.withDefaults()
	popts := d.pebbleOptions()
	d.applyHook(popts)
	return popts
}

// applyHook calls the Pebble hook, if any, on popts, and sets the logger
// back to the store's (Options.Logger wins over the hook's).
func (o *Options) applyHook(popts *pebble.Options) {
	logger := popts.Logger
	if o.Pebble != nil {
		o.Pebble(popts)
	}
	popts.Logger = logger
}

func init() {
	lsminternal.Hooks.DB = func(s any) *pebble.DB { return s.(*Store).db }
	lsminternal.Hooks.PebbleDir = func(s any) string { return s.(*Store).pebbleDirPath() }
	lsminternal.Hooks.Tracker = func(s any) *ssttracker.Tracker { return s.(*Store).tracker }
}

// pebbleOptions returns the store's Pebble options before its listeners
// and the Options.Pebble hook.
func (o *Options) pebbleOptions() *pebble.Options {
	popts := &pebble.Options{
		FS:                          o.FS,
		Comparer:                    keys.Comparer,
		Logger:                      o.Logger,
		BlockPropertyCollectors:     []func() pebble.BlockPropertyCollector{sstsummary.NewCollector},
		FormatMajorVersion:          pebble.FormatNewest,
		L0CompactionThreshold:       l0CompactionThreshold,
		L0StopWritesThreshold:       max(2*l0CompactionThreshold, o.L0StopSublevels),
		CompactionConcurrencyRange:  compactionConcurrency,
		MaxOpenFiles:                1000,
		DisableAutomaticCompactions: false,
		CacheSize:                   o.CacheSize,
		ReadOnly:                    o.ReadOnly,
		ErrorIfNotExists:            o.MustExist,
	}
	// Bloom filters on the prefixes (table, vnode, pk) of every level: a
	// checked writer's read before an insert, and a point read of a pk
	// that is not there, skip the SSTs that cannot hold it without reading
	// their data blocks.
	//
	// MinLZ (Pebble's fastest compression on amd64, Snappy elsewhere) on every
	// level: a checkpoint's SSTs are written on the commit path, and the
	// interleaved writes of a backfill are compacted several times.
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		popts.Levels[i].Compression = fastestCompression
	}
	// Checkpoints committed as batches fill the memtable: up to four
	// memtables may wait for their flush before Pebble stalls writes (its
	// default is two), so that a checkpoint seldom finds the memtables
	// full and falls back to an ingestion (Store.memtableStall).
	popts.MemTableStopWritesThreshold = 4
	// 64 MiB memtables (Pebble's default is 4 MiB; CockroachDB runs 64 MiB),
	// as RisingWave buffers a checkpoint's writes in its shared buffer:
	// a memtable then holds many checkpoints of a backfill, whose flush is
	// one L0 file instead of one every few checkpoints. In BenchmarkScale
	// at 1M rows (uniform) the store's backfill ran at 0.27× raw Pebble
	// instead of 0.20×, its load at 0.61× instead of 0.25×, and its
	// compactions wrote 197 instead of 597 bytes per row. The memory is
	// Pebble's memtable arena, filled as it is written; the Options.Pebble
	// hook can set another size.
	popts.MemTableSize = 64 << 20
	// A new MANIFEST (a snapshot of the version) once one passes 4 MiB
	// (Pebble's default is 128 MiB): Open reads the MANIFEST before Pebble
	// does, to refuse one that would open an older version, and the store
	// keeps a copy of it (manifest.go).
	popts.MaxManifestFileSize = maxManifestFileSize
	popts.EnsureDefaults()
	// No tombstone-density compactions. Pebble picks an SST whose blocks are
	// dense with point tombstones and compacts it into the next level with
	// every file it overlaps. The store's tombstones are GC's SINGLEDELs,
	// which the compaction package compacts per vnode from the statistics
	// (its TombstoneShare trigger), and the deletes of the live-statistics
	// rows each commit rewrites: a few KB of metadata keys in every L0
	// file, for which Pebble rewrote whole L0 files of MV rows. In
	// BenchmarkScale at 1M rows (VnodeOrder, 3 runs each way) the backfill
	// compacted 0 instead of 165 bytes per row and ran in 2.4–2.7 s instead
	// of 3.1–3.7 s. Ordinary compactions still drop those tombstones.
	popts.Experimental.TombstoneDenseCompactionThreshold = -1
	// Flushes and compactions cut their SSTs where a table ends (Open adds
	// the vnode partitions of its large tables: sstSpans).
	popts.Experimental.SpanPolicyFunc = (*sstSpans)(nil).policy
	// An ingestion that overlaps the memtable (which holds only what was
	// written through DB()) would be queued as a flushable, outside the LSM
	// version until a flush: the statistics refresh at the end of Commit
	// would miss the checkpoint's SSTs. Make Pebble flush the memtable first.
	popts.Experimental.DisableIngestAsFlushable = func() bool { return true }
	return popts
}

// l0CompactionThreshold is the store's Pebble L0CompactionThreshold: the L0
// sublevels at which Pebble compacts L0 into the base level. Every
// checkpoint ingests its SSTs into L0, and a backfill's (all of the MV's
// vnodes at once) and a load's (pks spread over the table) overlap every
// earlier one, so each checkpoint is a sublevel: with Pebble's default of 4,
// each base compaction merges four small checkpoints into the whole base
// level, and the same rows are rewritten again and again. 16 sublevels
// merge four times as much at once — the measured bytes compacted per row
// fell by half or more (BenchmarkScale's *-compact-B/row) — as RisingWave's
// Hummock lets checkpoint sub-levels pile up in L0 before compacting them.
// Reads pay with more L0 files to merge; checked writers' reads mostly skip
// them by their bloom filters.
const l0CompactionThreshold = 16

func fastestCompression() *sstable.CompressionProfile { return sstable.FastestCompression }

func compactionConcurrency() (int, int) {
	return 1, max(2, runtime.GOMAXPROCS(0))
}
