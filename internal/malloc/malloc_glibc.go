//go:build cgo && linux

package malloc

/*
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

// arenas_limited is set by limit_arenas, which the dynamic loader runs
// before the Go runtime starts its threads: glibc fixes its arena limit
// when a second thread first allocates, so a later mallopt can come too
// late (under cgo the runtime allocates a thread's start arguments with
// malloc).
static int arenas_limited;

__attribute__((constructor)) static void limit_arenas(void) {
#if defined(__GLIBC__) && defined(M_ARENA_MAX)
	if (getenv("MALLOC_ARENA_MAX") == NULL) {
		arenas_limited = mallopt(M_ARENA_MAX, 1);
	}
#endif
}

static int limited(void) { return arenas_limited; }

static void stats(size_t *in_use, size_t *free_held) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
	struct mallinfo2 m = mallinfo2();
	*in_use = m.uordblks + m.hblkhd;
	*free_held = m.fordblks;
#else
	*in_use = 0;
	*free_held = 0;
#endif
}

// hold_free leaves n blocks of size bytes, written, free in the arena,
// each followed by a small block kept (leaked) so that free can neither
// merge them nor return them by shrinking the heap's top: what a block
// cache that evicted leaves behind.
static void hold_free(int n, size_t size) {
	void **p = malloc(sizeof(void *) * n);
	for (int i = 0; i < n; i++) {
		p[i] = malloc(size);
		memset(p[i], 1, size);
		memset(malloc(64), 1, 64);
	}
	for (int i = 0; i < n; i++) {
		free(p[i]);
	}
	free(p);
}

static void trim(void) {
#if defined(__GLIBC__)
	malloc_trim(0);
#endif
}
*/
import "C"

const cgoEnabled = true

// ArenasLimited reports whether the process started with glibc's malloc
// limited to one arena by this package.
func ArenasLimited() bool { return C.limited() == 1 }

// Trim returns the memory free in malloc's arenas to the OS (glibc's
// malloc_trim), so that the next allocations fault in fresh pages as a
// new process's would.
func Trim() { C.trim() }

// ReadStats returns what glibc's malloc holds (mallinfo2); false where it
// cannot say (a glibc older than 2.33).
func ReadStats() (Stats, bool) {
	var inUse, free C.size_t
	C.stats(&inUse, &free)
	if inUse == 0 && free == 0 {
		return Stats{}, false
	}
	return Stats{InUse: uint64(inUse), Free: uint64(free)}, true
}

// holdFree leaves n written blocks of size bytes free in malloc's arena,
// which the process keeps until Trim (for the tests).
func holdFree(n, size int) { C.hold_free(C.int(n), C.size_t(size)) }
