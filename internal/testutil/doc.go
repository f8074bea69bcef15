// Package testutil holds what the randomized and crash tests of several
// packages share, so that each package does not keep its own copy.
//
// Seeds: Seed picks a randomized test's seed from its flag, or the fixed
// DefaultSeed when the flag is 0 (so make test gives the same result on every
// run), or the clock under -random-seeds or LSMSTATS_RANDOM_SEEDS=1 (for
// exploration), and logs the line that reruns it, "seed: N (...; rerun with
// -FLAG=N)". Each package keeps registering its own flag (-seed,
// -torture-seed, ...); -random-seeds is this package's.
//
// Child processes: a crash test re-runs its own test binary as a child
// (StartChild); the package's TestMain sees the child's environment
// variables, runs the child's workload instead of the tests and ends with
// ExitChild. The child reports its progress as lines on stdout (phase tags,
// commits, "E <error>"); the parent reads them (ReadUntil, KillAfter,
// Lines), kills the child with SIGKILL at a moment it chose (Kill,
// KillAfter), waits for it and learns how it ended (Wait), then reopens and
// checks what the child left behind. Missing tells which phases no kill has
// landed in yet, for tests that aim their kills at each phase in turn.
//
// It is imported by tests only.
package testutil
