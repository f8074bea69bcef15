//go:build !linux

package bench

import (
	"time"
)

// cpuOf returns f's wall time: no thread CPU clock here.
func cpuOf(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}
