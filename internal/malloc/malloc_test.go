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
