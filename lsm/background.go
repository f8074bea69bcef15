package lsm

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Background is the work Pebble does behind a store's writes, as one who
// forecasts a job's speed on the store needs it: how much was written, and
// how long the flushes and compactions that writing causes kept Pebble busy.
// Both count from the store's Open, so Busy/Written is the background time a
// written byte has cost over the store's life (its load included).
type Background struct {
	// Written is the bytes of the checkpoints the store committed, in the
	// measure of Metrics.BufferedBytes (the writers' buffers: rows, keys
	// and their entries' overhead), counted when committed or, for the
	// part a writer spilled, when spilled; and, when the store opened on
	// a WAL it had not flushed (after a crash), the bytes of the memtables
	// Pebble replayed from it and flushed before Open returned, which
	// Busy counts the flush of.
	Written int64
	// Busy is how long at least one flush or compaction was running, the
	// running ones counted up to now; Running is how many run now. Work
	// that overlaps counts once: Busy is wall time, not the sum of the
	// jobs' times.
	Busy    time.Duration
	Running int
}

// Background returns the store's background work so far. It takes no
// Pebble lock and walks nothing: a caller may read it at every checkpoint.
// It is safe for concurrent use, Close included.
func (s *Store) Background() Background {
	busy, running := s.busy.read(time.Now())
	return Background{
		Written: s.metrics.committedBytes.Load() + s.metrics.spilledBytes.Load() + s.busy.replayed.Load(),
		Busy:    busy,
		Running: running,
	}
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
