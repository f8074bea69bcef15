package testutil

import (
	"testing"
	"time"
)

// Seed returns seed, the value of the test flag named flag, or a time-based
// seed if it is 0, and logs "seed: N (rerun with -flag=N)".
func Seed(t testing.TB, flag string, seed uint64) uint64 {
	t.Helper()
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed: %d (rerun with -%s=%d)", seed, flag, seed)
	return seed
}
