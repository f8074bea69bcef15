//go:build !race

package keystats_test

const raceEnabled = false
