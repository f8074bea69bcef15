//go:build !race

package ssttracker

const physRace = false
