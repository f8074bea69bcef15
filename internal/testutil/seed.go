package testutil

import (
	"flag"
	"os"
	"testing"
	"time"
)

// DefaultSeed is the seed of every randomized test whose own seed flag is
// left at 0, so that make test gives the same result on every run.
const DefaultSeed = 1

// RandomSeedsEnv, set to a non-empty value other than "0", does what
// -random-seeds does, for a run over packages of which some do not import
// this one (go test ./... refuses a flag a package does not define):
// LSMSTATS_RANDOM_SEEDS=1 make test.
const RandomSeedsEnv = "LSMSTATS_RANDOM_SEEDS"

var randomSeeds = flag.Bool("random-seeds", false,
	"randomized tests whose seed flag is 0 draw a time-based seed instead of the fixed default (for exploration; the seed is logged)")

// RandomSeeds reports whether the randomized tests draw time-based seeds:
// -random-seeds, or RandomSeedsEnv in the environment.
func RandomSeeds() bool {
	if *randomSeeds {
		return true
	}
	v := os.Getenv(RandomSeedsEnv)
	return v != "" && v != "0"
}

// Seed returns a randomized test's seed: seed, the value of the test flag
// named flag, if it is not 0; else a time-based seed under RandomSeeds; else
// DefaultSeed. It logs the seed and how it was chosen, "seed: N (...; rerun
// with -flag=N)", so that a run that failed is replayed by its flag.
func Seed(t testing.TB, flag string, seed uint64) uint64 {
	t.Helper()
	how := "from -" + flag
	switch {
	case seed != 0:
	case RandomSeeds():
		seed, how = uint64(time.Now().UnixNano()), "time based: -random-seeds"
	default:
		seed, how = DefaultSeed, "the fixed default; -random-seeds draws a time-based one"
	}
	t.Logf("seed: %d (%s; rerun with -%s=%d)", seed, how, flag, seed)
	return seed
}
