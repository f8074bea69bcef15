//go:build race

package objstore_test

// raceEnabled: Pebble's invariants are on under the race detector, which
// turn some of its errors into panics.
const raceEnabled = true
