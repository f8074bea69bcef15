//go:build cgo && linux

package malloc

/*
#include <malloc.h>
#include <stdlib.h>

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
