package lsm

import (
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// compactionScheduler is the store's Pebble CompactionScheduler. Its policy
// is Pebble's default one: run as many compactions as the DB allows without
// permission (GetAllowedWithoutPermission), and when one ends, or every
// 100 ms, or when Pebble says its allowance grew, start waiting ones up to
// that number. It exists for one guard, guardedDB: Pebble's own scheduler
// is built inside pebble.Open, so it cannot be wrapped.
//
// The guard. Pebble v2.1.7 caches a compaction it picked while every slot
// was taken, and runs that pick when a slot frees (Schedule). A manual
// compaction (DB.Compact) whose context is cancelled leaves Pebble's queue
// of manual compactions, but not that cache. If the next slot frees without
// a new LSM version (the compaction in it failed, as under an I/O error),
// Schedule runs the cached pick, does not find it in the queue, and panics
// in the scheduler's goroutine: "did not find manual compaction with id".
// Store.CompactRange passes a context that Close and the caller cancel.
// The panic leaves Pebble as it was (its locks are deferred, and the pick
// was taken from the cache before the check), so the guard recovers it,
// reports the grant as not taken, and Pebble picks afresh next time.
// TestStaleManualPick shows the panic and the guard.
//
// A scheduler serves one DB at a time (each Register starts afresh); a
// second DB registered while one is makes it log an error and fall back to
// granting everything (see Register), never panic.
type compactionScheduler struct {
	logger pebble.Logger

	mu struct {
		sync.Mutex
		cond *sync.Cond // broadcast when a registration's grant loop ends
		// registered counts the Register calls not yet matched by an
		// Unregister: the DBs open on this scheduler.
		registered int
		// cur is the registration served while exactly one DB is
		// registered (outside the fallback); nil when none is.
		cur *registration
		// shared is the fallback (see Register): set when a second DB
		// registers while one is, until every DB has unregistered. drained
		// is the registration that was served when it began, whose
		// goroutine grants that DB's waiting compactions once and ends.
		shared  bool
		drained *registration
	}
}

// registration is the scheduler's state for one DB between its Register
// and its Unregister: a DB registered after an earlier one unregistered
// (options opened again after a Close) starts afresh. It is also the grant
// handle of the compactions it grants. Its counters are under the
// scheduler's mutex.
type registration struct {
	s  *compactionScheduler
	db guardedDB

	stop chan struct{} // closed by Unregister
	poke chan struct{} // UpdateGetAllowedWithoutPermission's and the fallback's signal
	done chan struct{} // closed when the ticker goroutine returns

	running  int  // compactions granted and not Done
	allowed  int  // the DB's allowance when last asked
	granting bool // one grant loop at a time
}

var _ pebble.CompactionScheduler = (*compactionScheduler)(nil)
var _ pebble.CompactionGrantHandle = (*registration)(nil)

// schedulerTick is how often the scheduler asks the DB for waiting
// compactions when nothing else made it ask (Pebble's default: 100 ms).
const schedulerTick = 100 * time.Millisecond

// newCompactionScheduler returns a scheduler for one DB at a time, which
// logs to logger (not nil).
func newCompactionScheduler(logger pebble.Logger) *compactionScheduler {
	s := &compactionScheduler{logger: logger}
	s.mu.cond = sync.NewCond(&s.mu.Mutex)
	return s
}

// Register implements pebble.CompactionScheduler.
//
// A scheduler serves one DB at a time: Pebble's CompactionScheduler
// interface does not say which DB calls TrySchedule or Unregister, so two
// DBs cannot be told apart. A second DB registers when a store's Pebble
// options are cloned (the scheduler with them) and opened while the store
// is open. That is a mistake of the caller (each DB needs options with a
// scheduler of its own, or none: pebble.Open then makes one), but not one
// worth a panic in a background goroutine: Register logs it with Errorf
// and falls back, until every DB on the scheduler has unregistered, to a
// policy that needs no DB's identity and never calls a DB after any
// Unregister. TrySchedule grants every compaction Pebble asks for, so no
// DB ever waits for a grant (its concurrency is then bounded only by the
// compactions Pebble can pick, not by its allowance), and the goroutine
// of the DB served until then grants that DB's waiting compactions once
// and ends. No waiting compaction is cached, so the stale manual pick of
// guardedDB cannot arise either. TestSchedulerSharedByTwoDBs shows both
// DBs compacting and closing in either order.
func (s *compactionScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.registered++
	if s.mu.registered == 1 {
		r := &registration{
			s:    s,
			db:   guardedDB{DBForCompaction: db, logger: s.logger},
			stop: make(chan struct{}),
			poke: make(chan struct{}, 1),
			done: make(chan struct{}),
		}
		s.mu.cur = r
		go r.tick()
		return
	}
	s.logger.Errorf("lsmstats: the compaction scheduler of a store's Pebble options is registered by %d Pebble databases at once "+
		"(options cloned from a store's and opened while it is open?); each database needs a scheduler of its own "+
		"(leave Options.Experimental.CompactionScheduler nil). Until they are all closed, every compaction they ask for runs at once",
		s.mu.registered)
	if s.mu.shared {
		return
	}
	s.mu.shared = true
	s.mu.drained, s.mu.cur = s.mu.cur, nil
	s.mu.drained.signal()
}

// Unregister implements pebble.CompactionScheduler: no call reaches the DB
// after it returns.
func (s *compactionScheduler) Unregister() {
	s.mu.Lock()
	if s.mu.registered == 0 {
		s.mu.Unlock()
		s.logger.Errorf("lsmstats: compaction scheduler unregistered by a Pebble database it did not register")
		return
	}
	s.mu.registered--
	var r *registration
	if s.mu.shared {
		// Which DB this is cannot be told: wait for the drained one's
		// goroutine, which ends by itself.
		r = s.mu.drained
		if s.mu.registered == 0 {
			s.mu.shared, s.mu.drained = false, nil
		}
		s.mu.Unlock()
	} else {
		r, s.mu.cur = s.mu.cur, nil
		s.mu.Unlock()
		close(r.stop)
	}
	<-r.done
	s.mu.Lock()
	for r.granting {
		s.mu.cond.Wait()
	}
	s.mu.Unlock()
}

// TrySchedule implements pebble.CompactionScheduler.
func (s *compactionScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.shared {
		return true, ungoverned{}
	}
	r := s.mu.cur
	if r == nil {
		return false, nil
	}
	r.allowed = r.db.GetAllowedWithoutPermission()
	if r.running >= r.allowed {
		return false, nil
	}
	r.running++
	return true, r
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
func (s *compactionScheduler) UpdateGetAllowedWithoutPermission() {
	s.mu.Lock()
	r := s.mu.cur
	if r == nil {
		s.mu.Unlock()
		return
	}
	allowed := r.db.GetAllowedWithoutPermission()
	grew := allowed > r.allowed
	r.allowed = allowed
	s.mu.Unlock()
	if grew {
		r.signal()
	}
}

// signal wakes r's goroutine.
func (r *registration) signal() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// Started, MeasureCPU and CumulativeStats implement
// pebble.CompactionGrantHandle; the scheduler does not account CPU.
func (r *registration) Started()                                          {}
func (r *registration) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (r *registration) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a granted compaction ended,
// and its slot goes to a waiting one.
func (r *registration) Done() {
	r.s.mu.Lock()
	r.running--
	r.s.mu.Unlock()
	r.grant()
}

func (r *registration) tick() {
	defer close(r.done)
	t := time.NewTicker(schedulerTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.poke:
		case <-r.stop:
			return
		}
		r.s.mu.Lock()
		drain := r.s.mu.drained == r
		r.s.mu.Unlock()
		if drain {
			r.drain()
			return
		}
		r.grant()
	}
}

// grant starts waiting compactions while the DB allows more than run. The
// DB is called without the scheduler's mutex held: Pebble calls
// TrySchedule and Done under its own mutex, which GetWaitingCompaction and
// Schedule take.
func (r *registration) grant() {
	s := r.s
	s.mu.Lock()
	for r.granting {
		s.mu.cond.Wait()
	}
	if s.mu.cur != r {
		s.mu.Unlock()
		return
	}
	r.allowed = r.db.GetAllowedWithoutPermission()
	free := r.allowed - r.running
	if free <= 0 {
		s.mu.Unlock()
		return
	}
	r.granting = true
	s.mu.Unlock()
	for ; free > 0; free-- {
		if !r.scheduleOne() {
			break
		}
	}
	r.endGranting()
}

// drain starts every compaction the DB waits for, regardless of its
// allowance: the fallback's last call to the DB (see Register).
func (r *registration) drain() {
	s := r.s
	s.mu.Lock()
	for r.granting {
		s.mu.cond.Wait()
	}
	r.granting = true
	s.mu.Unlock()
	for r.scheduleOne() {
	}
	r.endGranting()
}

// scheduleOne starts the DB's waiting compaction, if there is one.
func (r *registration) scheduleOne() bool {
	if waiting, _ := r.db.GetWaitingCompaction(); !waiting {
		return false
	}
	if !r.db.Schedule(r) {
		return false
	}
	r.s.mu.Lock()
	r.running++
	r.s.mu.Unlock()
	return true
}

func (r *registration) endGranting() {
	r.s.mu.Lock()
	r.granting = false
	r.s.mu.cond.Broadcast()
	r.s.mu.Unlock()
}

// ungoverned is the grant handle of the fallback (see
// compactionScheduler.Register), which counts nothing.
type ungoverned struct{}

func (ungoverned) Started()                                          {}
func (ungoverned) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (ungoverned) CumulativeStats(pebble.CompactionGrantHandleStats) {}
func (ungoverned) Done()                                             {}

// guardedDB is a DBForCompaction whose Schedule survives Pebble's stale
// manual pick (see compactionScheduler).
type guardedDB struct {
	pebble.DBForCompaction
	logger pebble.Logger
}

// staleManualPick is the message of Pebble's assertion that a cached manual
// compaction is no longer queued.
const staleManualPick = "did not find manual compaction with id"

// Schedule runs the DB's waiting compaction; false when there was none, or
// when it was a cancelled manual compaction, which Pebble drops.
func (g guardedDB) Schedule(h pebble.CompactionGrantHandle) (started bool) {
	defer func() {
		if r := recover(); r != nil {
			err, ok := r.(error)
			if !ok || !strings.Contains(err.Error(), staleManualPick) {
				panic(r)
			}
			g.logger.Infof("lsmstats: dropped a cancelled manual compaction that Pebble had picked: %v", err)
		}
	}()
	return g.DBForCompaction.Schedule(h)
}
