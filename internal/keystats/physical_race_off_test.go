//go:build !race

package keystats

const physRace = false
