package testutil

import (
	"sync"
	"time"
)

// Overlap shows whether operations run at once. Once armed, it counts the
// operations between Enter and Leave, remembers the most at once, and
// holds each Enter until want of them run at once or until a deadline:
// operations that run concurrently meet there and go on together, while
// operations one at a time never meet (each waits out the deadline, so a
// test of concurrency fails rather than hangs). The zero value is
// disarmed; it is safe for concurrent use.
type Overlap struct {
	mu       sync.Mutex
	armed    bool
	want     int
	running  int
	most     int
	met      chan struct{}
	deadline time.Time
}

// Arm starts counting from zero, with want operations to meet and wait as
// the deadline of every Enter from now on.
func (o *Overlap) Arm(want int, wait time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed, o.want, o.running, o.most = true, want, 0, 0
	o.met, o.deadline = make(chan struct{}), time.Now().Add(wait)
}

// Disarm stops counting and returns the most operations that ran at once.
func (o *Overlap) Disarm() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.armed = false
	return o.most
}

// Enter counts an operation that starts, holding it as Overlap says, and
// reports whether it was counted (the Overlap is armed): an operation
// counted must Leave once it ends.
func (o *Overlap) Enter() bool {
	o.mu.Lock()
	if !o.armed {
		o.mu.Unlock()
		return false
	}
	o.running++
	o.most = max(o.most, o.running)
	if o.running == o.want {
		close(o.met)
		o.want = -1 // met once
	}
	met, wait := o.met, time.Until(o.deadline)
	o.mu.Unlock()
	if wait > 0 {
		select {
		case <-met:
		case <-time.After(wait):
		}
	}
	return true
}

// Leave counts an operation that Enter counted as ended.
func (o *Overlap) Leave() {
	o.mu.Lock()
	o.running--
	o.mu.Unlock()
}
