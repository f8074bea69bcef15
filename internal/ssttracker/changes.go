package ssttracker

// Changes reported by Pebble's events.
//
// Every change to the LSM's file set that Pebble makes on its own comes with
// an event that names the files: FlushEnd the flushed tables (level 0, or
// the levels of tables ingested as a flushable), CompactionEnd the input
// tables by level and the outputs (a move compaction names one file as
// both), TableIngested the ingested tables with their levels. The listener
// logs these changes, and a refresh derives the next Version from them: it
// reads the new files and subtracts those that left, with no listing of
// the live SSTs — its cost is that of the changed files, whatever the
// LSM's size (the O(files) copy of the Version's file list aside).
//
// A listing is still the ground truth. A refresh lists when asked to
// (Refresh), at the first refresh after SetDB, after a failed refresh
// (the changes it had taken are gone with it), when the log overflowed, and
// when the changes do not add up:
//   - a new file cannot be opened by its number (a virtual table, which
//     shares its backing file; or a file gone before it was read, with no
//     logged change removing it);
//   - a moved file is not in the Version;
//   - TableDeleted names a file the Version still holds (a removal came
//     with no event).
//
// Two changes come without any event: the files an excise cuts (an
// IngestAndExcise; whoever excises calls Refresh) and the virtual tables
// that an ingest-time split or an excising delete-only compaction makes
// (Pebble's IngestSplit and EnableDeleteOnlyCompactionExcises, off by
// default and in the store; a virtual output fails to open and brings a
// listing).
//
// # Order
//
// FlushEnd and CompactionEnd fire under Pebble's mutex, in the same hold
// that installs the version edit, so they are logged in the order of the
// edits, and a compaction's inputs are logged as created before it. Pebble
// fires TableIngested after it releases the mutex: a compaction may consume
// an ingested file and be logged first. So a refresh takes the net effect
// of its changes, which does not depend on their order because Pebble never
// reuses a file number: a file created and removed within them is never
// read, and a removed file number is remembered (deadFiles) so that its
// creation, logged later, is dropped. The same rules make the changes
// logged while a listing ran harmless: a creation the listing shows is
// skipped, and a removal of a file it no longer shows does nothing.
//
// A listing drains the log first, then passes a barrier (a snapshot
// opened and closed takes Pebble's mutex, so every compaction logged
// before it has installed its read state, which a listing reads), and then
// lists: everything drained is in the listing.

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
)

// maxLoggedChanges bounds the change log; past it the log is dropped and
// the next refresh lists.
const maxLoggedChanges = 1 << 14

// maxDeadFiles bounds the removed file numbers remembered (deadFiles).
const maxDeadFiles = 1 << 12

// fileChange is one change to the file set, as an event reported it.
type fileChange struct {
	removed []fileSlot
	added   []pebble.TableInfo
	// levels are the levels of added.
	levels []int
	// deleted are files whose physical deletion TableDeleted reported.
	deleted []uint64
}

// moves reports whether num is both removed and added by c (a move).
func (c *fileChange) moves(num uint64) bool {
	return slices.ContainsFunc(c.removed, func(s fileSlot) bool { return s.num == num }) &&
		slices.ContainsFunc(c.added, func(t pebble.TableInfo) bool { return uint64(t.FileNum) == num })
}

// changeLog holds the changes logged since the last refresh took them.
type changeLog struct {
	mu      sync.Mutex
	changes []fileChange
	// lost is set when changes were dropped: the next refresh lists.
	lost bool
}

func (l *changeLog) add(c fileChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lost {
		return
	}
	if len(l.changes) >= maxLoggedChanges {
		l.changes, l.lost = nil, true
		return
	}
	l.changes = append(l.changes, c)
}

// drain returns the logged changes and whether any were lost, and empties
// the log.
func (l *changeLog) drain() ([]fileChange, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs, lost := l.changes, l.lost
	l.changes, l.lost = nil, false
	return cs, lost
}

// logFlush logs a flush's tables (FlushEnd; under Pebble's mutex).
func (t *Tracker) logFlush(info pebble.FlushInfo) {
	if info.Err != nil {
		return
	}
	c := fileChange{added: slices.Clone(info.Output), levels: make([]int, len(info.Output))}
	if info.Ingest {
		copy(c.levels, info.IngestLevels)
	}
	t.log.add(c)
}

// logCompaction logs a compaction's inputs and outputs (CompactionEnd;
// under Pebble's mutex).
func (t *Tracker) logCompaction(info pebble.CompactionInfo) {
	if info.Err != nil || !info.Done {
		return // a failed compaction changed nothing
	}
	var c fileChange
	for _, l := range info.Input {
		for _, tbl := range l.Tables {
			c.removed = append(c.removed, fileSlot{uint64(tbl.FileNum), l.Level})
		}
	}
	c.added = slices.Clone(info.Output.Tables)
	c.levels = make([]int, len(c.added))
	for i := range c.levels {
		c.levels[i] = info.Output.Level
	}
	t.log.add(c)
}

// logIngest logs the tables of an ingestion (TableIngested). Tables
// ingested as a flushable (level -1) enter the LSM with their flush, whose
// FlushEnd names them.
func (t *Tracker) logIngest(info pebble.TableIngestInfo) {
	if info.Err != nil {
		return
	}
	var c fileChange
	for _, tbl := range info.Tables {
		if tbl.Level >= 0 {
			c.added = append(c.added, tbl.TableInfo)
			c.levels = append(c.levels, tbl.Level)
		}
	}
	if len(c.added) > 0 {
		t.log.add(c)
	}
}

// logDeleted logs the physical deletion of a table (TableDeleted).
func (t *Tracker) logDeleted(info pebble.TableDeleteInfo) {
	if info.Err == nil {
		t.log.add(fileChange{deleted: []uint64{uint64(info.FileNum)}})
	}
}

// deadFiles remembers the most recent maxDeadFiles removed file numbers
// (under the Tracker's refreshMu).
type deadFiles struct {
	set   map[uint64]struct{}
	order []uint64
}

func (d *deadFiles) add(num uint64) {
	if d.set == nil {
		d.set = map[uint64]struct{}{}
	}
	if _, ok := d.set[num]; ok {
		return
	}
	if len(d.order) >= maxDeadFiles {
		delete(d.set, d.order[0])
		d.order = d.order[1:]
	}
	d.set[num] = struct{}{}
	d.order = append(d.order, num)
}

func (d *deadFiles) has(num uint64) bool {
	_, ok := d.set[num]
	return ok
}

// addRemoved remembers the files that changes removed.
func (d *deadFiles) addRemoved(changes []fileChange) {
	for i := range changes {
		c := &changes[i]
		for _, r := range c.removed {
			if !c.moves(r.num) {
				d.add(r.num)
			}
		}
	}
}

// setNum sets a Pebble file number field of an internal type from num.
func setNum[T ~uint64](field *T, num uint64) { *field = T(num) }

// apply derives the Version that follows base from changes, reading the
// new files. It returns a nil Version if the changes do not add up: the
// caller lists instead.
func (l *loader) apply(ctx context.Context, base *Version, changes []fileChange, dead *deadFiles) (*Version, error) {
	// The net effect: files removed, files created, the levels files moved
	// to (in order), and the physically deleted files.
	killed := map[uint64]bool{}
	type created struct {
		info  pebble.TableInfo
		level int
	}
	var born []created
	var moves []fileSlot
	var deleted []uint64
	for i := range changes {
		c := &changes[i]
		for _, r := range c.removed {
			if !c.moves(r.num) {
				killed[r.num] = true
			}
		}
		for j, tbl := range c.added {
			num := uint64(tbl.FileNum)
			if c.moves(num) {
				moves = append(moves, fileSlot{num, c.levels[j]})
			} else {
				born = append(born, created{tbl, c.levels[j]})
			}
		}
		deleted = append(deleted, c.deleted...)
	}
	dead.addRemoved(changes)

	var fresh []*sstRef
	named := map[uint64]bool{}
	for _, b := range born {
		num := uint64(b.info.FileNum)
		if killed[num] || dead.has(num) {
			continue // created and removed: never read
		}
		if _, ok := base.fileIndex(num); ok {
			continue // a listing already showed it
		}
		if named[num] {
			continue // named twice
		}
		named[num] = true
		info := pebble.SSTableInfo{TableInfo: b.info}
		setNum(&info.BackingSSTNum, num)
		fresh = append(fresh, &sstRef{fileNum: num, level: b.level, info: &info})
	}
	var added, removed []*liveFile
	for _, r := range l.loadAll(ctx, fresh, false) {
		if r.err != nil {
			if oserror.IsNotExist(r.err) {
				return nil, nil
			}
			return nil, r.err
		}
		added = append(added, r.f)
	}
	for num := range killed {
		if i, ok := base.fileIndex(num); ok {
			removed = append(removed, base.files[i])
		}
	}
	if len(added) == 0 && len(removed) == 0 && len(moves) == 0 {
		// Nothing arrived or left (a deletion, or changes a listing
		// already showed): no copy of the file list.
		if holdsAny(base.files, deleted) {
			return nil, nil // a removal that came without an event
		}
		return l.next(base, base.files, base.slots, nil, nil, 0), nil
	}
	slices.SortFunc(added, byFileNum)
	slices.SortFunc(removed, byFileNum)

	// The next file list: base's files that stay, merged with the new ones.
	files := make([]*liveFile, 0, len(base.files)-len(removed)+len(added))
	i, j, k := 0, 0, 0
	for i < len(base.files) || j < len(added) {
		switch {
		case k < len(removed) && i < len(base.files) && base.files[i] == removed[k]:
			i, k = i+1, k+1
		case j == len(added) || (i < len(base.files) && base.slots[i].num < added[j].info.FileNum):
			files = append(files, base.files[i])
			i++
		default:
			files = append(files, added[j])
			j++
		}
	}
	moved := 0
	for _, m := range moves {
		x, ok := slices.BinarySearchFunc(files, m.num, fileNumIs)
		if !ok {
			if killed[m.num] || dead.has(m.num) {
				continue
			}
			return nil, nil // a moved file the Version does not hold
		}
		if files[x].info.Level != m.level {
			f := *files[x]
			f.info.Level = m.level
			files[x] = &f
			moved++
		}
	}
	if holdsAny(files, deleted) {
		return nil, nil // a removal that came without an event
	}
	return l.next(base, files, slotsOf(files), added, removed, moved), nil
}

// holdsAny reports whether files (sorted by number) hold any of nums.
func holdsAny(files []*liveFile, nums []uint64) bool {
	for _, num := range nums {
		if _, ok := slices.BinarySearchFunc(files, num, fileNumIs); ok {
			return true
		}
	}
	return false
}

func byFileNum(a, b *liveFile) int { return cmp.Compare(a.info.FileNum, b.info.FileNum) }

func fileNumIs(f *liveFile, num uint64) int { return cmp.Compare(f.info.FileNum, num) }
