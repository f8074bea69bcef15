//go:build !cgo || !linux

package malloc

const cgoEnabled = false

// ArenasLimited is false without cgo or outside Linux: Pebble's manual
// memory is then Go's, or the platform's allocator has no arenas to limit.
func ArenasLimited() bool { return false }

// Trim does nothing without cgo or outside Linux.
func Trim() {}

// ReadStats returns false without cgo or outside Linux.
func ReadStats() (Stats, bool) { return Stats{}, false }

func holdFree(n, size int) {}
