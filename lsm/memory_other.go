//go:build !linux

package lsm

// machineMemory is not read here: the cache takes its fallback size.
func machineMemory() int64 { return 0 }
