//go:build race

package stats_test

// raceEnabled scales the store-level randomized tests down under the race
// detector.
const raceEnabled = true
