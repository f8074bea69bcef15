//go:build race

package keystats

// physRace scales the randomized tests down under the race detector, which
// slows Pebble (built with invariants) about tenfold.
const physRace = true
