package soak

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A worker's stderr from CI (trimmed): a WAL write failed by the soak's
// injector, Pebble panicked closing the WAL in rotateWAL, and a deferred
// unlock turned the panic into a fatal error that prints the panic value
// without its text.
const rotateWALPanic = `panic: (*withstack.withStack) 0x1ccffc67c7f8
	fatal error: sync: unlock of unlocked mutex

goroutine 1 [running]:
internal/sync.fatal({0xd49ea8?, 0x1ccffc3dc080?})
	/usr/local/go/src/runtime/panic.go:1191 +0x18
sync.(*Mutex).Unlock(...)
	/usr/local/go/src/sync/mutex.go:65
panic({0xcadc00?, 0x1ccffc67c7f8?})
	/usr/local/go/src/runtime/panic.go:860 +0x13a
github.com/cockroachdb/pebble/v2.(*DB).rotateWAL(0x1ccffc54f908)
	/root/go/pkg/mod/github.com/cockroachdb/pebble/v2@v2.1.7/db.go:2822 +0x2c5
github.com/cockroachdb/pebble/v2.(*DB).makeRoomForWrite(0x1ccffc54f908, 0x1ccffc47e480)
	/root/go/pkg/mod/github.com/cockroachdb/pebble/v2@v2.1.7/db.go:2697 +0x97
github.com/lsmstats/lsmstats/lsm.(*batchSink).commit(0x1ccffc48e390, 0x3b)
	/tmp/ci/lsm/commit.go:309 +0xae
`

func TestPebblePanicked(t *testing.T) {
	require.True(t, pebblePanicked(rotateWALPanic))
	// A panic raised in our own code is not Pebble's, whatever Pebble
	// frames lie below it.
	ours := `panic({0x1, 0x2})
	/usr/local/go/src/runtime/panic.go:860 +0x13a
github.com/lsmstats/lsmstats/lsm.(*Store).Commit(0x1)
	/tmp/ci/lsm/commit.go:85 +0xade
github.com/cockroachdb/pebble/v2.(*DB).Apply(...)
`
	require.False(t, pebblePanicked(ours))
	require.False(t, pebblePanicked("fatal error: all goroutines are asleep - deadlock!\n"))
}
