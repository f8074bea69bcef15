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
type compactionScheduler struct {
	logger pebble.Logger
	db     guardedDB // set by Register, before any other call

	stop chan struct{} // closed by Unregister
	poke chan struct{} // UpdateGetAllowedWithoutPermission's signal
	done chan struct{} // closed when the ticker goroutine returns

	mu struct {
		sync.Mutex
		running      int  // compactions granted and not Done
		allowed      int  // the DB's allowance when last asked
		granting     bool // one grant loop at a time
		grantingDone *sync.Cond
		unregistered bool
	}
}

var _ pebble.CompactionScheduler = (*compactionScheduler)(nil)
var _ pebble.CompactionGrantHandle = (*compactionScheduler)(nil)

// schedulerTick is how often the scheduler asks the DB for waiting
// compactions when nothing else made it ask (Pebble's default: 100 ms).
const schedulerTick = 100 * time.Millisecond

func newCompactionScheduler(logger pebble.Logger) *compactionScheduler {
	s := &compactionScheduler{
		logger: logger,
		stop:   make(chan struct{}),
		poke:   make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	s.mu.grantingDone = sync.NewCond(&s.mu.Mutex)
	return s
}

// Register implements pebble.CompactionScheduler.
func (s *compactionScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.db = guardedDB{DBForCompaction: db, logger: s.logger}
	go s.tick()
}

// Unregister implements pebble.CompactionScheduler: no call reaches the DB
// after it returns.
func (s *compactionScheduler) Unregister() {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.unregistered = true
	for s.mu.granting {
		s.mu.grantingDone.Wait()
	}
}

// TrySchedule implements pebble.CompactionScheduler.
func (s *compactionScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.unregistered {
		return false, nil
	}
	s.mu.allowed = s.db.GetAllowedWithoutPermission()
	if s.mu.running >= s.mu.allowed {
		return false, nil
	}
	s.mu.running++
	return true, s
}

// UpdateGetAllowedWithoutPermission implements pebble.CompactionScheduler.
func (s *compactionScheduler) UpdateGetAllowedWithoutPermission() {
	s.mu.Lock()
	allowed := s.db.GetAllowedWithoutPermission()
	grew := allowed > s.mu.allowed
	s.mu.allowed = allowed
	s.mu.Unlock()
	if grew {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// Started, MeasureCPU and CumulativeStats implement
// pebble.CompactionGrantHandle; the scheduler does not account CPU.
func (s *compactionScheduler) Started()                                          {}
func (s *compactionScheduler) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (s *compactionScheduler) CumulativeStats(pebble.CompactionGrantHandleStats) {}

// Done implements pebble.CompactionGrantHandle: a granted compaction ended,
// and its slot goes to a waiting one.
func (s *compactionScheduler) Done() {
	s.mu.Lock()
	s.mu.running--
	s.mu.Unlock()
	s.grant()
}

func (s *compactionScheduler) tick() {
	defer close(s.done)
	t := time.NewTicker(schedulerTick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-s.poke:
		case <-s.stop:
			return
		}
		s.grant()
	}
}

// grant starts waiting compactions while the DB allows more than run. The
// DB is called without s.mu held: Pebble calls TrySchedule and Done under
// its own mutex, which GetWaitingCompaction and Schedule take.
func (s *compactionScheduler) grant() {
	s.mu.Lock()
	for s.mu.granting {
		s.mu.grantingDone.Wait()
	}
	if s.mu.unregistered {
		s.mu.Unlock()
		return
	}
	s.mu.allowed = s.db.GetAllowedWithoutPermission()
	free := s.mu.allowed - s.mu.running
	if free <= 0 {
		s.mu.Unlock()
		return
	}
	s.mu.granting = true
	s.mu.Unlock()
	for ; free > 0; free-- {
		if waiting, _ := s.db.GetWaitingCompaction(); !waiting {
			break
		}
		if !s.db.Schedule(s) {
			break
		}
		s.mu.Lock()
		s.mu.running++
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.mu.granting = false
	s.mu.grantingDone.Broadcast()
	s.mu.Unlock()
}

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
