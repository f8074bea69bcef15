//go:build race

package ssttracker

// physRace scales the randomized tests down under the race detector, which
// slows Pebble (built with invariants) about tenfold.
const physRace = true
