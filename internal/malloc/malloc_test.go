package malloc

import (
	"os"
	"runtime"
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

// TestReadStats: with cgo on Linux, malloc's figures are readable and
// not zero (the runtime's cgo threads allocate), and Trim does not leave
// more free memory held than there was.
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
	Trim()
	after, _ := ReadStats()
	if after.Free > st.Free+1<<20 {
		t.Fatalf("free memory held after Trim %d > %d before (+1 MiB)", after.Free, st.Free)
	}
}
