package malloc

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestArenasLimited: with cgo on Linux (glibc, as on every machine this
// project builds on) the test binary started with one arena, unless its
// environment chose otherwise.
func TestArenasLimited(t *testing.T) {
	want := runtime.GOOS == "linux" && cgoEnabled && os.Getenv("MALLOC_ARENA_MAX") == ""
	if got := ArenasLimited(); got != want {
		t.Fatalf("ArenasLimited() = %v on %s with cgo %v and MALLOC_ARENA_MAX %q, want %v",
			got, runtime.GOOS, cgoEnabled, os.Getenv("MALLOC_ARENA_MAX"), want)
	}
}

// TestReadStats: with cgo on Linux, malloc's figures are readable, count
// live memory (the runtime's cgo threads allocate) and count the memory a
// churn of blocks left free in the arena.
func TestReadStats(t *testing.T) {
	st, ok := ReadStats()
	if !cgoEnabled || runtime.GOOS != "linux" {
		if ok {
			t.Fatalf("ReadStats() = %+v, true without cgo on Linux", st)
		}
		return
	}
	if !ok || st.InUse == 0 {
		t.Fatalf("ReadStats() = %+v, %v with cgo on Linux", st, ok)
	}
	const n, size = 256, 64 << 10 // 16 MiB, in blocks below malloc's mmap threshold
	holdFree(n, size)
	after, _ := ReadStats()
	if after.Free < n*size/2 {
		t.Fatalf("free memory held after freeing %d MiB: %d bytes (%d before)", n*size>>20, after.Free, st.Free)
	}
}

// TestTrim: the memory a churn of blocks left free in the arena, written
// and so resident, leaves the process's RSS when Trim returns it.
func TestTrim(t *testing.T) {
	if !cgoEnabled || runtime.GOOS != "linux" {
		Trim() // does nothing, and must not fail
		return
	}
	const n, size = 256, 64 << 10
	holdFree(n, size)
	before := rss(t)
	Trim()
	after := rss(t)
	if before-after < n*size/2 {
		t.Fatalf("RSS %d KiB before Trim, %d KiB after: want at least %d MiB returned", before>>10, after>>10, n*size>>21)
	}
}

// rss returns the process's resident memory in bytes (/proc/self/status).
func rss(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
