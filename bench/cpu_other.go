//go:build !unix

package bench

import "time"

// processCPU is not available here: CPU figures are zero.
func processCPU() time.Duration { return 0 }
