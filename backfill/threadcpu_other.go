//go:build !linux

package backfill

import "time"

// threadCPU is not available here: Figure.CPU falls back to wall time.
func threadCPU() (time.Duration, bool) { return 0, false }
