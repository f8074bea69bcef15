//go:build !race

package stats

const physRace = false
