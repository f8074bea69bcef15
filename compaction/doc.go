// Package compaction decides where MVCC garbage collection and Pebble manual
// compactions pay, from the statistics alone, and runs them in the
// background within configured bounds.
//
// # Model
//
// The store (package lsm) keeps every MVCC version until GC removes it:
// Store.GC writes a Pebble SINGLEDEL for each version no reader at or above
// the safe epoch can see, and those SINGLEDELs reclaim space only when a
// compaction meets them with their SETs (Store.CompactRange). The physical
// statistics (package stats) count, per (table, vnode), the MVCC entries
// (puts and deletes) and, apart, the Pebble tombstones GC wrote; the live
// statistics count the exact live rows. From these three numbers, for one
// vnode:
//
//	pending  = entries − pebble tombstones   what a compaction would leave
//	garbage  = pending − live rows           versions GC could still remove
//	                                         (if they are below the safe epoch)
//
// pending ≥ live rows always: every live row has its newest put, which GC
// never deletes. After GC at safe epoch = committed epoch and a compaction
// to the bottom level, entries = pending = live rows (lsm's acceptance
// test checks it exactly).
//
// # A round
//
// Every Interval the Policy takes one consistent Stats snapshot and the safe
// epoch, and evaluates each table: first its totals (O(1) per table; the
// triggers below are sums over vnodes, so a table whose totals are below
// every floor has no vnode above one and is skipped), then each vnode with
// data. Vnodes that trigger are grouped into ranges of adjacent vnodes (at
// most MaxVnodesPerRange each), ranked by the entries they would reclaim,
// and the best MaxRangesPerRound are processed: GC over each range where a
// GC trigger fired (paced by a shared rate.Limiter of Rate versions per
// second, resumed until the range is done), then a manual compaction of the
// ranges left with at least MinGarbage Pebble tombstones to drop. Pebble
// compacts whole SSTs, so ranges of a table that overlap a common SST are
// compacted together, once (BenchmarkPolicyRoundWork measures the bytes
// written both ways, in multiples of the table's live SST bytes). A vnode on
// which a round could do nothing (its garbage is above the safe epoch,
// pinned by a reader) is not retried until the safe epoch moves or it gains
// MinGarbage more entries: an unchanged store costs a round nothing but the
// scan of its statistics (BenchmarkPolicyRoundIdle measures it, for clean
// tables the table totals rule out and for vnodes that must each be
// evaluated).
//
// # Thresholds, and why
//
// VersionRatio = 1.1: GC a vnode when pending > 1.1 × live rows. This is
// TiKV's gc.ratio-threshold, used by its check_need_gc and its compaction
// filter: a scan reads every version it passes, so at ratio r it reads r
// entries per row; below 1.1 at most one entry in eleven is garbage, and a
// GC pass (which reads every version of the range) costs more than the
// scans it would speed up.
//
// DeleteShare = 0.2: GC a vnode when MVCC deletes not yet collected are at
// least 20% of its entries, whatever the ratio. A delete version hides its
// row but a scan still steps over it and the versions below it; deletes
// below the safe epoch are removed completely, with everything they shadow.
// The anchor is TiKV's region-compact-redundant-rows-percent (20), which
// compacts a region when MVCC deletes and stale versions reach 20% of its
// rows, and Cassandra/Scylla's tombstone_threshold (0.2).
//
// TombstoneShare = 0.3: compact a vnode when Pebble tombstones (GC's
// SINGLEDELs) are at least 30% of its entries plus tombstones. This is the
// deletion-ratio form of RocksDB's CompactOnDeletionCollector (which marks
// an SST for compaction when tombstones reach a ratio of its entries, or D
// of any N consecutive entries), at TiKV's default for the same check,
// region-compact-tombstones-percent (30). The vnode is our window: its keys
// are contiguous, so its share is the density a scan of it meets. It
// catches GC work whose compaction did not run or was interrupted; Pebble's
// own compactions would drop the SINGLEDELs too, but only when size
// triggers bring those files down.
//
// MinGarbage = 1024: no trigger fires for fewer reclaimable entries (or
// deletes, or tombstones). A pass plus compaction has a fixed cost — an
// ingestion (an L0 file and a MANIFEST edit) and a rewrite of every SST the
// range overlaps — that a thousand entries (about 100 KB of 100-byte rows)
// barely repay. TiKV's floors are 10,000 tombstones and 50,000 redundant
// rows, but per region of ~100 MiB, about a hundred times a vnode of a
// table of a few GiB.
//
// Bounds: MaxRangesPerRound (4) and MaxVnodesPerRange (32) cap the work of
// a round, Interval (30s) spaces rounds, and Rate (200,000 versions
// examined per second, about a fifteenth of what one unpaced pass reaches on
// one core: ~3 million, BenchmarkGC in package lsm) caps the read load of
// GC; compaction I/O is bounded by the ranges per round. TiKV checks 100
// regions every 5 minutes; our check is in memory, so the interval can be
// much shorter.
//
// # Lifecycle
//
// New validates the configuration; Start launches the loop; Stop cancels a
// round in progress (GC and compaction take its context), waits for the
// goroutine and is idempotent. RunRound runs one round synchronously, for
// tests, tools and benchmarks. A Policy never closes the Store; close the
// Store after Stop.
//
// # Faults
//
// A round that fails (an I/O error in a GC ingestion or a compaction) stops
// at the error, counts it (Counters.Errors) and leaves the store consistent:
// each GC batch is atomic, a failed compaction changes nothing. The loop
// logs the error and retries at the next interval, where a GC pass resumes
// and rereads the statistics. It ends by itself when the store is closed or
// refuses writes (lsm.ErrFailed: only a reopen, hence a new Policy, helps).
package compaction
