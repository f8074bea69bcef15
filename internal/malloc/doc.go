// Package malloc limits glibc's malloc, from which Pebble's manual memory
// comes, to one arena.
//
// Pebble allocates its block cache and memtables with C's calloc (when cgo
// is enabled), outside the Go heap. glibc's malloc gives each thread an
// arena of its own, up to eight per core, and memory freed into one arena
// serves only the threads attached to it. Go runs cgo calls on whichever
// OS thread is free, so a block cache that fills, evicts and refills
// spreads its freed blocks over all the arenas, and the process holds far
// more than the cache. CockroachDB, TiKV and RisingWave link jemalloc for
// the same reason; lsmstats keeps to the platform allocator and gives it
// one arena instead.
//
// Measured by BenchmarkScale's solo child (a process holding a store and a
// backfill job, then reading both tables once more; 16M rows in vnode
// order, a 3 GB block cache at capacity), the peak RSS beyond the block
// cache and the memtables, one run each:
//
//	glibc's defaults (up to 16 arenas here)        1.92 GB
//	MALLOC_ARENA_MAX=2                             1.64 GB
//	up to 16 arenas, malloc_trim every second      0.61 GB
//	mallopt(M_ARENA_MAX, 1) from Go, in TestMain   1.11 GB (too late)
//	one arena from process start (this package)    0.39 GB
//	the same, and malloc_trim every second         0.42 GB, 15% slower
//
// with no measurable cost in load or backfill time for the one arena on
// this 2-core machine (66.7 s and 47.4 s against 68.6 s and 49.7 s; a
// machine with more cores may contend for it, which was not measured). See docs/design.md,
// "What a process holds".
//
// glibc fixes its arena limit when a second thread first allocates, and
// under cgo the Go runtime allocates each new thread's start arguments
// with malloc, so a mallopt from Go code comes too late. Importing the
// package therefore limits the arenas from a C constructor, which the
// dynamic loader runs before the Go runtime starts, unless the
// environment sets MALLOC_ARENA_MAX, which is then the user's choice (and
// glibc's own). The CLI and the bench package's test binary import it; a
// program of the library's user gets the same by running with
// MALLOC_ARENA_MAX=1 (README.md, "Memory"). Without cgo or off Linux the
// package does nothing, and ArenasLimited says so.
package malloc

// Stats is what malloc holds: InUse the bytes of live allocations (those
// it mapped on their own included), Free the free bytes it keeps in its
// arenas, which the process holds but no allocation uses.
type Stats struct {
	InUse, Free uint64
}
