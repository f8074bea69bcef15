package ssttracker

// Compaction deltas: for each Pebble compaction, the change it made to the
// physical statistics of each table and vnode (Hummock's table_stats_change,
// at vnode granularity).
//
// # Computing a delta
//
// Pebble's CompactionEnd event names the input tables (per level) and the
// output tables by file number, nothing more. The tracker already holds the
// summary of every live file, so a compaction's delta is
//
//	Σ summaries of its outputs − Σ summaries of its inputs
//
// per (table, vnode): entries, MVCC puts and deletes, key bytes, apportioned
// value bytes and Pebble tombstones. A file that is both input and output (a
// move compaction) cancels and is left out, so a move has an empty delta.
//
// The inputs' summaries come from the Version before the compaction, the
// outputs' from the one after. The listener's callback (which runs under
// Pebble's mutex) logs the compaction's change (changes.go), then queues the
// event's file numbers and signals the background goroutine. An event is
// resolved by a refresh that starts after it was queued: that refresh takes
// the change from the log and applies it, or lists after a barrier that
// makes Pebble install the compaction's read state. Should a refresh still
// hold an input (other than a moved file) of a queued event, the event is
// left queued and another refresh (a listing) is requested after a backoff
// (after maxDeferrals such refreshes its live inputs are treated as missing:
// never counted twice). Inputs leave the LSM in the compaction's own version
// edit, so once none is live the listing is at or after it, and each output
// is either live or was consumed by a later compaction. Files that a refresh
// removes from the Version are kept for a while as "retired" (the inputs of
// compactions whose events are still queued, and outputs that a later
// compaction already consumed), so an input is found even when an earlier
// refresh, triggered by another event, already saw the compaction's result.
// Each retired file is dropped once a delta used it as an input, and the
// oldest beyond maxRetired are evicted.
//
// A file that appeared and disappeared between two refreshes (an output that
// another compaction consumed before the tracker listed it) was never read:
// its summary is unknown, and the delta lists it in Missing instead of
// guessing. Complete deltas are exact; TestCompactionDeltasSum checks that
// they add up to the change of the Version over a series of compactions.
//
// # Delivery
//
// Resolved deltas go to the feed's outbox (compactiondelta.Feed), and the
// tracker's goroutine (never Pebble's callback, never a caller of Refresh)
// delivers them to the subscribers without blocking: a subscriber whose
// buffer is full loses that delta, and the loss is counted. The Prometheus
// collector (CompactionCollector) exports per-table cumulative input and
// output counts of complete deltas; per-vnode figures are only in the
// deltas themselves, to keep the metrics' cardinality bounded by the
// tables.

import (
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/compactiondelta"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// maxPendingCompactions bounds the queued, unresolved events.
	maxPendingCompactions = 4096
	// maxRetired bounds the summaries kept of files no longer live.
	maxRetired = 4096
	// maxDeferrals bounds the refreshes an event waits for its inputs to
	// leave the listing; the goroutine retries after minRetryBackoff,
	// doubling up to maxRetryBackoff (about 1.5 s in all).
	maxDeferrals    = 16
	minRetryBackoff = time.Millisecond
	maxRetryBackoff = 128 * time.Millisecond
)

type compactionEvent struct {
	jobID           int
	reason          string
	inputs, outputs []compactiondelta.File
	// deferred counts the refreshes whose listing did not reflect it yet.
	deferred int
}

// deltaState is the Tracker's compaction-delta machinery: the events not
// resolved yet, the files that left the Version recently, and the feed
// that delivers the resolved deltas.
type deltaState struct {
	mu      sync.Mutex
	pending []compactionEvent
	retired map[uint64]*liveFile
	// retiredOrder is the retirement order (may hold consumed file numbers).
	retiredOrder []uint64

	feed *compactiondelta.Feed
	// retry asks the goroutine for a refresh after a backoff.
	retry chan struct{}
}

func (d *deltaState) init() {
	d.retired = map[uint64]*liveFile{}
	d.feed = compactiondelta.NewFeed()
	d.retry = make(chan struct{}, 1)
}

// recordCompaction queues a finished compaction. It runs in Pebble's
// callback: it copies the file numbers and returns.
func (t *Tracker) recordCompaction(info pebble.CompactionInfo) {
	if info.Err != nil || !info.Done {
		return // a failed compaction changed nothing
	}
	ev := compactionEvent{jobID: info.JobID, reason: info.Reason}
	for _, l := range info.Input {
		for _, tbl := range l.Tables {
			ev.inputs = append(ev.inputs, compactiondelta.File{FileNum: uint64(tbl.FileNum), Level: l.Level})
		}
	}
	for _, tbl := range info.Output.Tables {
		ev.outputs = append(ev.outputs, compactiondelta.File{FileNum: uint64(tbl.FileNum), Level: info.Output.Level})
	}
	d := &t.deltas
	d.mu.Lock()
	dropped := len(d.pending) >= maxPendingCompactions
	if dropped {
		d.pending = d.pending[1:]
	}
	d.pending = append(d.pending, ev)
	d.mu.Unlock()
	if dropped {
		d.feed.DropEvent()
	}
}

func (d *deltaState) pendingLen() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// resolve is called by Refresh after it published v (derived from base): it
// retires the files that left and resolves, in order, the first n queued
// events (queued before the refresh listed the files) whose compaction the
// listing reflects, and publishes their deltas to the feed. It reports
// whether an event waits for another refresh.
func (d *deltaState) resolve(n int, base, v *Version) (retry bool) {
	d.mu.Lock()
	if base != v {
		d.retire(base, v)
	}
	n = min(n, len(d.pending))
	done := 0
	for ; done < n; done++ {
		ev := &d.pending[done]
		if d.stale(ev, v) {
			if ev.deferred++; ev.deferred <= maxDeferrals {
				retry = true
				break
			}
		}
	}
	events := d.pending[:done:done]
	d.pending = slices.Clone(d.pending[done:])
	cds := make([]compactiondelta.Compaction, 0, len(events))
	for _, ev := range events {
		cds = append(cds, d.compute(ev, v))
	}
	d.mu.Unlock()
	d.feed.Publish(cds)
	return retry
}

// stale reports whether v's listing predates the compaction: an input of
// ev (not a moved file) is still live in v, or a moved file is live above
// the level it moved to. (CompactionEnd fires before Pebble installs the
// compaction's read state; refreshLocked's barrier makes a listing wait for
// it, and this check catches a Version that still predates the compaction
// all the same. Files only move down, so a moved file higher up is from
// before.)
func (d *deltaState) stale(ev *compactionEvent, v *Version) bool {
	for _, in := range ev.inputs {
		f := v.liveFile(in.FileNum)
		if f == nil {
			continue
		}
		// All outputs of a compaction go to one level.
		if !ev.moved(in.FileNum) || f.info.Level < ev.outputs[0].Level {
			return true
		}
	}
	return false
}

func (ev *compactionEvent) moved(num uint64) bool {
	for _, out := range ev.outputs {
		if out.FileNum == num {
			return true
		}
	}
	return false
}

func (v *Version) liveFile(num uint64) *liveFile {
	if i, ok := v.fileIndex(num); ok {
		return v.files[i]
	}
	return nil
}

// retire keeps the files of base that are not in v.
func (d *deltaState) retire(base, v *Version) {
	j := 0
	for i, s := range base.slots {
		for j < len(v.slots) && v.slots[j].num < s.num {
			j++
		}
		if j == len(v.slots) || v.slots[j].num != s.num {
			d.retired[s.num] = base.files[i]
			d.retiredOrder = append(d.retiredOrder, s.num)
		}
	}
	for len(d.retired) > maxRetired && len(d.retiredOrder) > 0 {
		delete(d.retired, d.retiredOrder[0])
		d.retiredOrder = d.retiredOrder[1:]
	}
	if len(d.retiredOrder) > 4*maxRetired {
		// Compact the order of consumed entries.
		order := d.retiredOrder[:0:0]
		for _, n := range d.retiredOrder {
			if _, ok := d.retired[n]; ok {
				order = append(order, n)
			}
		}
		d.retiredOrder = order
	}
}

func (d *deltaState) lookup(v *Version, num uint64) *liveFile {
	if f := v.liveFile(num); f != nil {
		return f
	}
	return d.retired[num]
}

// compute builds the delta of one event against v and the retired files,
// and drops its inputs from the retired files.
func (d *deltaState) compute(ev compactionEvent, v *Version) compactiondelta.Compaction {
	b := compactiondelta.NewBuilder(ev.jobID, ev.reason, ev.inputs, ev.outputs)
	moved := map[uint64]bool{}
	for _, in := range ev.inputs {
		for _, out := range ev.outputs {
			if in.FileNum == out.FileNum {
				moved[in.FileNum] = true
			}
		}
	}
	add := func(files []compactiondelta.File, output bool) {
		for _, cf := range files {
			if moved[cf.FileNum] {
				continue
			}
			f := d.lookup(v, cf.FileNum)
			if !output && f != nil && v.liveFile(cf.FileNum) != nil {
				// Still live after maxDeferrals refreshes: not known to
				// have left, so not counted.
				f = nil
			}
			if f == nil {
				b.Missing(cf.FileNum)
				continue
			}
			b.Add(f.info.Summary, f.values, output)
		}
	}
	add(ev.inputs, false)
	add(ev.outputs, true)
	for _, in := range ev.inputs {
		if !moved[in.FileNum] {
			delete(d.retired, in.FileNum)
		}
	}
	return b.Finish()
}

// SubscribeCompactions returns a channel that receives the delta of every
// Pebble compaction that finishes from now on, in order, sent by the
// tracker's background goroutine (Start). buffer is the channel's capacity
// (at least 1); a delta that finds it full is dropped for this subscriber and
// counted in lsmstats_compaction_deltas_dropped_total. cancel ends the
// subscription and closes the channel; Close closes it too. Safe for
// concurrent use.
func (t *Tracker) SubscribeCompactions(buffer int) (deltas <-chan compactiondelta.Compaction, cancel func()) {
	return t.deltas.feed.Subscribe(buffer)
}

// CompactionStats returns the cumulative delta counts.
func (t *Tracker) CompactionStats() compactiondelta.Stats { return t.deltas.feed.Stats() }

// CompactionCollector returns a Prometheus collector of the tracker's
// compaction deltas (compactiondelta.Feed.Collector, which lists the
// metrics), whose descriptors desc names: the store gives them the
// namespace and constant labels of its other metrics, so that several
// stores can register theirs in one registry.
func (t *Tracker) CompactionCollector(desc func(name, help string, labels ...string) *prometheus.Desc) prometheus.Collector {
	return t.deltas.feed.Collector(desc)
}
