package lsm

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Background returns the work Pebble did behind the store's writes since
// the store opened, as one who forecasts a job's speed on the store needs
// it (a backfill's ETA reads it at every checkpoint): written is the bytes
// of the checkpoints the store committed, in the measure of
// Metrics.BufferedBytes (the writers' buffers: rows, keys and their
// entries' overhead), counted when committed or, for the part a writer
// spilled, when spilled; and, when the store opened on a WAL it had not
// flushed (after a crash), the bytes of the memtables Pebble replayed from
// it and flushed before Open returned. busy is how long at least one flush
// or compaction was running, the running ones counted up to now: wall
// time, overlaps counted once. So busy/written is the background time a
// written byte has cost over the store's life (its load included). It
// takes no Pebble lock and walks nothing, unlike Metrics; it is safe for
// concurrent use, Close included.
func (s *Store) Background() (written int64, busy time.Duration) {
	busy, _ = s.busy.read(time.Now())
	return s.metrics.committedBytes.Load() + s.metrics.spilledBytes.Load() + s.busy.replayed.Load(), busy
}

// backgroundWork measures the wall time during which at least one of Pebble's
// flushes or compactions ran, from its event listener's begin and end
// events (which run under Pebble's mutex: it takes only its own), and the
// bytes of the WAL Pebble replayed and flushed while it opened.
type backgroundWork struct {
	// opened is set once Pebble's Open returned; replayed sums the input
	// bytes of the flushes before (Open flushes the memtables it replays
	// from the WAL before it returns).
	opened   atomic.Bool
	replayed atomic.Int64

	mu      sync.Mutex
	running int
	since   time.Time     // when running last went from 0 to 1
	busy    time.Duration // the periods that ended
}

func (c *backgroundWork) begin(now time.Time) {
	c.mu.Lock()
	if c.running == 0 {
		c.since = now
	}
	c.running++
	c.mu.Unlock()
}

func (c *backgroundWork) end(now time.Time) {
	c.mu.Lock()
	if c.running > 0 { // an end without its begin (a listener added late) is ignored
		if c.running--; c.running == 0 {
			c.busy += now.Sub(c.since)
		}
	}
	c.mu.Unlock()
}

func (c *backgroundWork) read(now time.Time) (time.Duration, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	busy := c.busy
	if c.running > 0 {
		busy += now.Sub(c.since)
	}
	return busy, c.running
}

// listen adds the clock's hooks to el, after those el has.
func (c *backgroundWork) listen(el *pebble.EventListener) {
	el.FlushBegin = after(el.FlushBegin, func(pebble.FlushInfo) { c.begin(time.Now()) })
	el.FlushEnd = after(el.FlushEnd, func(info pebble.FlushInfo) {
		if !c.opened.Load() {
			c.replayed.Add(int64(info.InputBytes))
		}
		c.end(time.Now())
	})
	el.CompactionBegin = after(el.CompactionBegin, func(pebble.CompactionInfo) { c.begin(time.Now()) })
	el.CompactionEnd = after(el.CompactionEnd, func(pebble.CompactionInfo) { c.end(time.Now()) })
}

// after returns a hook that calls prev, if any, then f.
func after[T any](prev, f func(T)) func(T) {
	return func(info T) {
		if prev != nil {
			prev(info)
		}
		f(info)
	}
}
