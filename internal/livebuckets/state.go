package livebuckets

import (
	"math"
	"sync/atomic"
	"time"
)

// State owns the current Snapshot and what is persisted of it (persist.go).
// Not safe for concurrent use, but for Current, which may be called from
// any goroutine.
type State struct {
	cur *Snapshot
	// pub is cur, for Current's readers outside the store's lock: set
	// whenever cur changes.
	pub atomic.Pointer[Snapshot]
	// budget is the bucket budget of the tables added from now on.
	budget int64
	// format is the store format of the rows Load reads (SetFormat).
	format uint64
	// images are the buckets as their rows hold them, of the vnodes whose
	// current buckets differ from those rows (changed by the log, or by
	// rescans since the last commit), with the epoch of the oldest log row
	// that holds their changes; imageBuckets is their number of buckets.
	images       map[vkey]image
	imageBuckets int
	// pending are the vnodes rescans changed since the last commit, each
	// as the last commit left it (what its rows and the log hold): the next
	// commit persists their changes since.
	pending map[vkey]*liveVnode
	// leftOut are the tables whose log sections Load reads without
	// applying them (LeaveOut).
	leftOut map[uint32]struct{}
	// logs are the log rows persisted, oldest first, and logBytes their
	// bytes.
	logs     []logRow
	logBytes int
	// foldFrom is the epoch of the first commit of the round of folds in
	// progress (persist.go), 0 between rounds.
	foldFrom uint64
	// oldLogs are the log rows loaded from a store of format 2, which
	// Migrate rewrites.
	oldLogs []oldLog
}

// image is a vnode's buckets as its rows hold them, and since the epoch
// of the oldest log row that holds its changes since (unlogged: none yet,
// a rescan's that the next commit logs).
type image struct {
	buckets []bucket
	since   uint64
}

// unlogged is the since of an image whose changes no log row holds yet.
const unlogged = math.MaxUint64

// logRow is a persisted log row: its epoch and its bytes (key and value).
type logRow struct {
	epoch uint64
	bytes int
}

// oldLog is a log row of format 2: its epoch and its layout.
type oldLog struct {
	epoch  uint64
	layout []byte
}

// NewState returns an empty state whose tables have a bucket budget of
// TableBucketBudget.
func NewState() *State {
	s := &State{budget: TableBucketBudget, format: 3, images: map[vkey]image{}, pending: map[vkey]*liveVnode{}}
	s.setCurrent(&Snapshot{tables: map[uint32]*liveTable{}, at: time.Now()})
	return s
}

// setCurrent makes l the current snapshot.
func (s *State) setCurrent(l *Snapshot) {
	s.cur = l
	s.pub.Store(l)
}

// SetBucketBudget sets the bucket budget of the tables added after it: a
// bucket may hold 1/budget of its table's rows (when that is more than
// 1/SplitDivisor of its vnode, that is when budget < vnodes·SplitDivisor),
// so a table keeps fewer than 8·budget + vnodes buckets whatever its rows:
// neighbours holding together less than half the limit merge, in every
// vnode each time the table's rows/budget doubles (coarsen). Buckets cost
// about 64 bytes plus their bound (a pk), so the budget bounds the table's
// live statistics in memory and their metadata rows, whatever its size; a
// smaller budget widens each range estimate's bounds, which span the two
// buckets holding its end points. A budget below 1 is TableBucketBudget.
// Buckets already stored keep their bounds, and follow the new limit at
// their vnode's next split or merge.
func (s *State) SetBucketBudget(budget int) {
	if budget < 1 {
		budget = TableBucketBudget
	}
	s.budget = int64(budget)
}

// Current returns the current snapshot. Safe to call concurrently with
// the State's other methods: a snapshot is immutable once published (but
// while a store loads, before FinishLoad).
func (s *State) Current() *Snapshot { return s.pub.Load() }

// AddTable makes room for a table of the given vnode count.
func (s *State) AddTable(table uint32, vnodeCount int) {
	if _, ok := s.cur.tables[table]; ok {
		return
	}
	next := s.cur.cloneTables()
	next.tables[table] = &liveTable{vnodes: make([]*liveVnode, vnodeCount), budget: s.budget}
	next.at = time.Now()
	s.setCurrent(next)
}

// LeaveOut makes Load read the log rows' sections of a table that is not
// added (a read-only store left its catalog entry out) without applying
// them, where it would refuse a section of an unknown table.
func (s *State) LeaveOut(table uint32) {
	if s.leftOut == nil {
		s.leftOut = map[uint32]struct{}{}
	}
	s.leftOut[table] = struct{}{}
}
