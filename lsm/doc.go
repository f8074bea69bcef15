// Package lsm is a Hummock-like MVCC state store on Pebble: tables split into
// vnodes, writers that buffer row ops per epoch, atomic checkpoints, and reads
// at an epoch. Statistics (package stats) are kept current with every
// checkpoint.
//
// # Model
//
// A table has an id, a pk schema and a vnode count; each row lives in the
// vnode its distribution key hashes to. A Writer is the local store of one
// actor for one table and owns a set of vnodes. It takes Insert, Delete and
// Update ops at its current epoch into an in-memory buffer, and Seal(e) closes
// epoch e for it. Commit(e) needs every writer to have sealed e and makes every
// sealed epoch <= e durable and visible at once. Reads are at an epoch: the
// newest version at or below it wins, and a delete version hides the row.
//
// # Keys
//
// Every Pebble key has one of the shapes of package keys (normative,
// see docs/format.md): a row version is table | vnode | pk | 0x00 | ^version |
// kind | 0x0A with version = epoch<<16 | spill offset.
//
// # Spills and atomic checkpoints: why staging, and its cost
//
// docs/design.md §8 weighs two ways to keep spilled data invisible until its epoch
// commits. We stage spills outside Pebble and ingest them at commit, rather
// than writing them into Pebble early and removing uncommitted versions at
// open, because:
//
//   - atomicity is Pebble's: one Ingest call is one MANIFEST edit, so a
//     checkpoint (data, committed epoch, high-water mark and live statistics)
//     is all there or not at all after a crash, with no repair step at open;
//   - physical statistics stay exact: SSTs in Pebble never hold uncommitted
//     versions that the stats would count and a repair would later retract;
//   - no Pebble range deletions or tombstones are needed to undo a spill.
//
// The price is that a spilled piece is written twice: once to the staging
// directory, once more when Commit merges all pieces and buffers into
// non-overlapping SSTs (Pebble refuses overlapping local SSTs in one Ingest).
// Spills happen only above the memory watermark, so the extra write is paid
// only by epochs too big for memory; BenchmarkCommit measures the store
// against raw Pebble.
//
// A checkpoint without spills and smaller than Options.CommitBatchBytes
// skips the staging and the SSTs: it is one synced Pebble batch, atomic in
// the WAL, and reaches L0 with the other checkpoints of its memtable in one
// flushed SST instead of an SST of its own that overlaps every earlier one.
// Its keys are summarised by the collector as the batch is built, and the
// statistics tracker counts that summary until the flush's SST replaces it,
// so statistics are current when Commit returns either way. Open flushes
// what the WAL replayed, Close flushes so that read-only opens see SSTs
// only, and every ingestion and manual compaction flushes first (Pebble
// would wait for an overlapping memtable's flush without end while flushes
// fail); these flushes give up after 5 s or at a failed flush.
//
// Ingestion bypasses Pebble's write stalls (they guard memtable writes only);
// one ingestion per checkpoint adds L0 files quickly, so Commit waits while L0
// has Options.L0StopSublevels sublevels or more, and counts those stalls. It
// waits only while compactions can drain L0: not when automatic compactions
// are off, not past a failed compaction or Options.L0IdleLimit (1 s) with
// none running (Pebble retries failed compactions itself; holding commits
// would not help), and never longer than Options.L0StallLimit (10 s): after
// a failed compaction Pebble leaves its inputs alone for 30 s while other
// compactions may keep running.
//
// # Pebble's configuration for one ingestion per checkpoint
//
// A checkpoint's SSTs land in L0 and, when its rows are spread over a
// table's key space (a load, or a backfill writing every vnode of its MV at
// every checkpoint), overlap every earlier checkpoint: each is an L0
// sublevel. Pebble compacts L0 into its base level at 16 sublevels rather
// than its default 4, so that each base compaction merges four times as
// much new data into the same base level (the bytes compacted per row fell
// by half or more in BenchmarkScale); Options.L0StopSublevels defaults to 48
// above it. Every level has bloom filters on the row prefixes (a checked
// writer's read of a pk that is not there skips the SSTs that cannot hold
// it) and MinLZ compression, and the block cache (Options.CacheSize)
// defaults to an eighth of the machine's memory. Even so, a backfill's
// interleaved MV writes are compacted several times over, where a scan in
// key order would write files that never overlap: BenchmarkScale measures
// the store against raw Pebble both ways (RunRaw, RunRawInterleaved in
// package bench).
//
// Every SST, Pebble's flushes and compactions (Options.Experimental's
// SpanPolicyFunc) and the store's own, ends where a table ends and, once
// the table's live bytes reach Options.PartitionBytes, where one of its 16
// vnode partitions ends (sstSpans, spans.go). A memtable holds rows of
// several tables, the backfill's state and the metadata of its
// checkpoints, and the MV rows of each actor's vnode range: cut at those
// bounds, the MV pieces of a backfill in vnode order overlap nothing and
// move down the levels unrewritten, as raw Pebble's SSTs of a scan in key
// order do. Small tables are not partitioned: 64 of them would make each
// flush about a thousand tiny SSTs (BenchmarkSmallTables).
//
// Options.PebbleOptions returns these options, for a comparison with raw
// Pebble doing the same work; Store.PebbleMetrics returns the metrics of
// the Pebble database under a store (its LSM shape and the bytes written
// into each level), and Store.Metrics the store's own counters (commits,
// spills, commit stalls, corruptions, GC), which Store.Collector exports
// to Prometheus. Store.Background is the cheap one to read at every
// checkpoint: the bytes the store took in and how long Pebble's flushes and
// compactions ran, from Pebble's event listener (background.go), which a
// backfill's ETA prices the flushes ahead with.
//
// # Logging
//
// Pebble and the store log through Options.Logger, a pebble.Logger: the
// store takes Pebble's interface as it is rather than one of its own, so
// that any logger a Pebble user has serves both, and one logger gets both
// kinds of lines. Nil is Pebble's default logger (every line to standard
// error, a line per flush, compaction and ingestion among them);
// QuietLogger keeps the errors only.
//
// # Epoch high-water mark
//
// Epochs only increase, across restarts too. A spill that writes data of an
// epoch above the durable high-water mark raises the mark first, durably; at
// Open the store refuses every epoch at or below max(committed epoch, mark),
// so no epoch whose data may have reached the disk is used again (a reused
// version key would break single-delete based garbage collection).
//
// # Live statistics
//
// Each op states the row's prior state (an insert: absent; a delete or
// update: the old row), so each buffered pk knows its live delta, and commit
// applies the deltas to the live-statistics buckets of package stats and
// persists the changed buckets in the same ingestion. Checked writers (the
// default) read before writing, as CockroachDB does, and refuse inconsistent
// ops; unchecked writers trust them and flag the table's live statistics as
// possibly containing estimates. RecomputeLiveStats (verify.go) replaces a
// table's counts by a scan at the committed epoch, bucket by bucket, persists
// them with one metadata ingestion and clears the flag; commits wait while it
// scans, as they do for Verify.
//
// # Garbage collection (gc.go)
//
// GC removes, per (table, vnode range), every version that no reader at or
// above the safe epoch (the committed epoch or the oldest pin) can see, by
// ingesting Pebble SINGLEDELs (safe: each version key is written once)
// together with the raised garbage-collection watermark, one atomic
// ingestion per batch; reads below the watermark are refused. CompactRange
// compacts a range to the bottom level so that SINGLEDELs and their SETs
// drop out; then physical entries equal live rows. Reads at the committed
// epoch take the epoch paired with their Pebble iterator's view, so a GC at
// a newer committed epoch can never have collected below the epoch they
// read at.
//
// # Bad input
//
// Every error names what was wrong and changes nothing: unknown tables,
// vnodes out of range or not owned, pks that do not decode, epochs out of
// order, ops on sealed epochs, commits of unsealed epochs, reads outside the
// readable epochs, operations after Close, foreign keys met by a read (an
// error for that read only), metadata that does not decode, and stores of a
// newer format or another comparer. A key of none of the shapes (written
// through DB()) fails the reads of the vnode it sits in and no other; the
// collector counts it apart (foreign), Verify reports it, and in the
// metadata range Open skips it.
//
// # Corruption
//
// Corrupt bytes come back as errors marked lsmstats.ErrCorruption that name
// what is corrupt, never as an exit, a panic or a wrong count:
//
//   - a block of an SST that fails its checksum fails the read that meets
//     it (the error names the file and the block); reads elsewhere go on.
//     Pebble's default for it is Logger.Fatalf: the store takes Pebble's
//     DataCorruption event instead, logs it and counts it;
//   - an SST whose footer, metaindex or properties block is corrupt cannot
//     be opened at all, by Pebble either: the physical statistics are not
//     refreshed past it and say so (Stats().PhysicalErr names the file)
//     rather than count it as empty; a payload that does not decode is
//     rebuilt from the file's keys (package stats);
//   - metadata rows that do not decode fail Open with an error marked
//     lsmstats.ErrCorruption (naming the key); a read-only store opens past those it can do
//     without, Verify reports them, and LiveIncomplete names the vnodes
//     whose live counts are short of a left-out row;
//   - a corrupt MANIFEST or OPTIONS file fails Open naming the file. Pebble
//     reads a MANIFEST up to its last valid record and takes the rest for
//     a torn write, which would open an older version and lose committed
//     rows without an error. The store refuses, before Pebble reads it, a
//     MANIFEST with a valid record after a damaged one, or shorter than
//     the checkpoint mark says was synced, and after Pebble opened a
//     committed epoch below the mark's (manifest.go, checkpoint.go); a
//     refused writable Open removes no file. The way back is the store's
//     own copy of the MANIFEST: RepairManifest (lsmstats repair) restores
//     a damaged MANIFEST from it when the result is exactly the MANIFEST
//     Pebble wrote, and refuses otherwise (then the store must be restored
//     from a copy of the whole store). Run Verify after it;
//   - on an object store, an SST's object deleted, cut short or changed in
//     the bucket is corruption like a damaged local file, and every error
//     about it names the object as well as the file number (Pebble's own
//     messages name the number alone). Pebble checks a remote SST's size
//     only in its background table-statistics job, where a mismatch would
//     end the process (Logger.Fatalf): the store logs it instead, and the
//     reads that meet the SST report it. Restoring the object heals the
//     store.
//
// Verify checks every block of every live SST and goes on past
// corruption: it reports every corrupt file and metadata row (Corrupt) and
// every statistic it could not check (Unchecked). One corruption Pebble
// does not let a caller handle: a corrupt block met while a compaction
// elides a SINGLEDEL panics in Pebble's goroutine (see Faults).
//
// # Read-only
//
// Options.ReadOnly opens an existing store for inspection: Pebble opens
// read-only, and the store creates and writes nothing (Pebble's LOCK file
// is opened, as Pebble locks the directory in every mode); writes return
// ErrReadOnly. A path without a store is refused with ErrNoStore, and so is
// one with Options.MustExist.
//
// # SSTs in an object store (objectstore.go)
//
// Options.ObjectStore keeps the store's SSTs in an S3-compatible bucket
// (package objstore), as Hummock keeps its SSTs in S3, through Pebble's
// shared storage: Pebble creates the SSTs there and reads them by ranged
// GETs. By default (remote.CreateOnSharedAll) every new SST goes to the
// bucket, at every level: the flushes into L0, every compaction's outputs,
// and every ingested SST, which is nearly all the store writes (a
// checkpoint, a GC batch and a metadata change each arrive as an
// ingestion, and Pebble copies an ingested file into the bucket whatever
// level it lands in). So the bucket holds all of the committed data, and
// what a node keeps locally is small and rebuildable from nothing but its
// own history: the WAL (empty between checkpoints, the store never writes
// through it but for metadata), the MANIFEST and Pebble's catalog of remote
// objects (which name the SSTs), the checkpoint mark, staging and the
// object-store record. ObjectStore.Levels = remote.CreateOnSharedLower
// keeps the outputs of flushes and of compactions into L0–L4 on local disk
// and sends only L5 and L6 (most of the bytes) to the bucket: fewer
// requests for short-lived upper-level files, at the price that losing the
// local disk then loses those files too. Ingested SSTs go to the bucket
// either way. Reads of remote SSTs that miss the block cache are GETs,
// each far slower than a local read; ObjectStore.CacheSize gives Pebble a
// secondary cache of remote blocks on local disk.
//
// Open checks the object store before anything is written: the endpoint
// answers, the credentials are accepted, the bucket exists (each refused
// with a message naming which, marked objstore.ErrUnreachable,
// ErrAccessDenied, ErrNoSuchBucket); a store created with an object store
// is refused without one, or with another (its identity marker, an object
// lsmstats-store-CREATOR, is missing there), and one created without is
// refused with one. Each store has a random creator id, in its objects'
// names, so stores share a bucket and a prefix without collisions. An
// object deleted or damaged in the bucket is corruption: reads and Verify
// name the SST and its object (ErrCorruption). While the server is down,
// requests are retried (bounded by the objstore.RetryPolicy, each retry
// logged), then fail with an error naming the endpoint; Pebble retries
// failed flushes and compactions, and a commit whose ingestion failed
// publishes nothing, so the same work succeeds once the server is back.
// A writable Open removes the store's orphaned objects (uploads that
// failed half-way, deletions that failed), which Pebble never does.
//
// # Backups (backup.go)
//
// The bucket alone is not the store: Pebble's MANIFEST, catalog and WAL
// are local. Store.Backup uploads them (Pebble's Checkpoint: a consistent
// cut) beside the SSTs under a name, and Restore writes the latest backup
// of a name into an empty directory, where Open finds the store at the
// backup's committed epoch. The SSTs a backup references outlive the
// compactions that replace them (Pebble's Checkpoint protects them; the
// sweeps keep what the latest backup names and remove what only older
// ones kept), and Restore removes the SSTs the lost life made after the
// backup before Pebble opens, so none is reused under its name. A backup
// is ~10 small objects: a WAL past 256 KiB is flushed into an SST first,
// and a recycled WAL file is cut after its last record.
//
// # Moving vnodes between stores (move.go)
//
// Store.MoveVnodes moves a vnode range of a table to another store on the
// same bucket and prefix, as RisingWave moves vnodes between compute nodes
// without copying rows: the destination takes the source's SSTs of
// Pebble's shared levels (L5 and L6) that hold the range by reference, as
// virtual SSTs restricted to it (Pebble's ScanInternal on the source,
// IngestAndExcise on the destination), and copies the rest (the versions
// in Pebble's memtables and L0–L4), with the range's live statistics,
// bucket for bucket; then the source excises the range (DropVnodes, which
// also ends a move cut short after its import). Every epoch the source
// keeps moves: the destination must have committed the source's epoch,
// and its GC watermark rises to the source's. Both stores' statistics of
// the range then equal a scan: the physical ones come from the SSTs (a
// virtual SST's summary from a scan of its object within its bounds), the
// live ones moved exactly. MoveStats counts the SSTs and bytes taken by
// reference and the versions and bytes copied.
//
// The two stores may be in two processes (vnodeexport.go): the source
// takes the range as a VnodeExport (Store.ExportVnodes), whose bytes
// (MarshalBinary; docs/format.md, "Vnode export") the destination decodes
// (DecodeVnodeExport) and imports (Store.ImportVnodes); the source holds
// the export, which keeps its reference markers on the shared SSTs'
// objects and the range frozen, until the destination acknowledged the
// import, then drops the range (DropVnodes) and releases the export.
// MoveVnodes is these steps in one process.
//
// # Faults
//
// An I/O error in the store's own files (staged spills, the SSTs a commit
// or GC pass writes under staging/) or in Pebble's ingestion of them comes
// back as an error of the operation that met it, and changes nothing: a
// failed commit publishes nothing and keeps its buffers (retry it), a
// failed GC batch is dropped (resume at GCResult.Resume). A failed spill is
// the exception: the op that crossed the watermark is already buffered,
// so the store refuses writes from then on (ErrFailed) and keeps serving
// reads; reopen it. Faults in Pebble's compactions are retried by Pebble
// (CompactRange returns them). A failed refresh of the physical statistics
// after a commit leaves the commit standing: Stats().PhysicalErr reports it
// until the tracker's background retry succeeds. Pebble ends the process on
// a failed write or sync of its WAL or MANIFEST (Logger.Fatalf) and panics
// on some others (a directory sync while the MANIFEST marker moves, a read
// error — or a corrupt block — while a compaction elides a SINGLEDEL, which
// GC writes): those are crashes, which no caller can contain (the panic is
// in Pebble's compaction goroutine), after which the store reopens at its
// last checkpoint (TestSingleDelElisionPanic). faults_test.go and
// faults_crash_test.go inject each of these with Pebble's errorfs.
//
// One Pebble panic the store does contain: a manual compaction
// (CompactRange) cancelled by its caller or by Close after Pebble picked it
// and cached the pick for a free compaction slot, which Pebble then runs
// when a slot frees without a new LSM version — after a failed compaction —
// and panics on ("did not find manual compaction with id"). The store runs
// Pebble's compactions through its own scheduler (scheduler.go), whose
// policy is Pebble's default and which drops that stale pick
// (TestStaleManualPick). The scheduler serves one Pebble database: Pebble
// options cloned from the store's and opened beside it (with the
// scheduler) make it log an error and grant every compaction until both
// are closed, rather than panic (TestSchedulerSharedByTwoDBs); options for
// raw Pebble come without it (Options.PebbleOptions).
package lsm
