package livebuckets

import (
	"flag"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/lsmstats/lsmstats/internal/testutil"
)

// The randomized tests accept -seed. Another file of this package may
// register the flag first; then it is shared.
var _ = func() bool {
	if flag.Lookup("seed") == nil {
		flag.Uint64("seed", 0, "seed for randomized tests (0 = time based)")
	}
	return true
}()

// seededRand returns the random source of a randomized test, from -seed
// (logged, so that a failure can be replayed).
func seededRand(t testing.TB) *rand.Rand {
	var seed uint64
	if f := flag.Lookup("seed"); f != nil {
		seed, _ = strconv.ParseUint(f.Value.String(), 10, 64)
	}
	seed = testutil.Seed(t, "seed", seed)
	return rand.New(rand.NewPCG(seed, seed^0x5DEECE66D))
}
