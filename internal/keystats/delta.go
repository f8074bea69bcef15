package keystats

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
// Resolved deltas go to an outbox, and the tracker's goroutine (never
// Pebble's callback, never a caller of Refresh) sends each to every
// subscriber's channel without blocking: a subscriber whose buffer is full
// loses that delta, and the loss is counted. The Prometheus collector
// (CompactionCollector) exports per-table cumulative input and output
// counts of complete deltas; per-vnode figures are only in the deltas
// themselves, to keep the metrics' cardinality bounded by the tables.

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/prometheus/client_golang/prometheus"
)

const (
	// maxPendingCompactions bounds the queued, unresolved events.
	maxPendingCompactions = 4096
	// maxOutbox bounds the resolved deltas awaiting delivery.
	maxOutbox = 1024
	// maxRetired bounds the summaries kept of files no longer live.
	maxRetired = 4096
	// maxDeferrals bounds the refreshes an event waits for its inputs to
	// leave the listing; the goroutine retries after minRetryBackoff,
	// doubling up to maxRetryBackoff (about 1.5 s in all).
	maxDeferrals    = 16
	minRetryBackoff = time.Millisecond
	maxRetryBackoff = 128 * time.Millisecond
)

// Delta is a signed change of physical statistics. The zero value is no
// change.
type Delta struct {
	Entries, Puts, Deletes int64
	KeyBytes, ValueBytes   int64
	PebbleTombstones       int64
}

func (d *Delta) add(c sstsummary.Counts, sign int64) {
	d.Entries += sign * int64(c.Entries)
	d.Puts += sign * int64(c.Puts)
	d.Deletes += sign * int64(c.Deletes)
	d.KeyBytes += sign * int64(c.KeyBytes)
	d.ValueBytes += sign * int64(c.ValueBytes)
	d.PebbleTombstones += sign * int64(c.PebbleTombstones)
}

// IsZero reports whether d changes nothing.
func (d Delta) IsZero() bool { return d == Delta{} }

// VnodeDelta is the change of one vnode.
type VnodeDelta struct {
	Vnode uint16
	Delta
}

// TableDelta is the change of one table: Delta = Out − In, and the vnodes
// whose counts changed, in increasing order.
type TableDelta struct {
	Table uint32
	Delta
	// In and Out are the table's counts in the inputs and in the outputs.
	In, Out sstsummary.Counts
	Vnodes  []VnodeDelta
}

// CompactionFile is one input or output table of a compaction.
type CompactionFile struct {
	FileNum uint64
	Level   int
}

// CompactionDelta is the change one Pebble compaction made to the physical
// statistics. Its slices are shared between subscribers: read-only.
type CompactionDelta struct {
	// JobID and Reason are Pebble's.
	JobID  int
	Reason string
	// Inputs and Outputs are the compaction's tables; a file in both (a move)
	// is in neither Tables.
	Inputs, Outputs []CompactionFile
	// Tables lists the tables with files in the compaction, in increasing id
	// order.
	Tables []TableDelta
	// Missing lists the files whose summary the tracker never read (see the
	// file comment); the delta leaves them out.
	Missing []uint64
}

// Complete reports whether every file's summary was known: then the delta
// is exact.
func (d *CompactionDelta) Complete() bool { return len(d.Missing) == 0 }

// Table returns the delta of one table, if the compaction touched it.
func (d *CompactionDelta) Table(id uint32) (TableDelta, bool) {
	i, ok := slices.BinarySearchFunc(d.Tables, id, func(t TableDelta, id uint32) int { return cmp.Compare(uint64(t.Table), uint64(id)) })
	if !ok {
		return TableDelta{}, false
	}
	return d.Tables[i], true
}

// Vnode returns the delta of one vnode (zero if unchanged).
func (t *TableDelta) Vnode(v uint16) Delta {
	i, ok := slices.BinarySearchFunc(t.Vnodes, v, func(d VnodeDelta, v uint16) int { return int(d.Vnode) - int(v) })
	if !ok {
		return Delta{}
	}
	return t.Vnodes[i].Delta
}

type compactionEvent struct {
	jobID           int
	reason          string
	inputs, outputs []CompactionFile
	// deferred counts the refreshes whose listing did not reflect it yet.
	deferred int
}

type subscriber struct {
	ch chan CompactionDelta
}

// tableIO are the cumulative input and output counts of a table over the
// complete deltas.
type tableIO struct{ in, out sstsummary.Counts }

// deltaState is the Tracker's compaction-delta machinery.
type deltaState struct {
	mu      sync.Mutex
	pending []compactionEvent
	outbox  []CompactionDelta
	retired map[uint64]*liveFile
	// retiredOrder is the retirement order (may hold consumed file numbers).
	retiredOrder []uint64

	// Metrics, under mu.
	complete, incomplete                      uint64
	droppedEvents, droppedOutbox, droppedSubs uint64
	tables                                    map[uint32]*tableIO

	deliver chan struct{}
	// retry asks the goroutine for a refresh after a backoff.
	retry chan struct{}

	subMu      sync.Mutex
	subs       map[*subscriber]struct{}
	subsClosed bool
}

func (d *deltaState) init() {
	d.retired = map[uint64]*liveFile{}
	d.tables = map[uint32]*tableIO{}
	d.subs = map[*subscriber]struct{}{}
	d.deliver = make(chan struct{}, 1)
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
			ev.inputs = append(ev.inputs, CompactionFile{FileNum: uint64(tbl.FileNum), Level: l.Level})
		}
	}
	for _, tbl := range info.Output.Tables {
		ev.outputs = append(ev.outputs, CompactionFile{FileNum: uint64(tbl.FileNum), Level: info.Output.Level})
	}
	d := &t.deltas
	d.mu.Lock()
	if len(d.pending) >= maxPendingCompactions {
		d.pending = d.pending[1:]
		d.droppedEvents++
	}
	d.pending = append(d.pending, ev)
	d.mu.Unlock()
}

func (d *deltaState) pendingLen() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.pending)
}

// resolve is called by Refresh after it published v (derived from base): it
// retires the files that left and resolves, in order, the first n queued
// events (queued before the refresh listed the files) whose compaction the
// listing reflects. It reports whether an event waits for another refresh.
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
	for _, ev := range events {
		cd := d.compute(ev, v)
		if cd.Complete() {
			d.complete++
			for _, td := range cd.Tables {
				io := d.tables[td.Table]
				if io == nil {
					io = &tableIO{}
					d.tables[td.Table] = io
				}
				io.in.Add(td.In)
				io.out.Add(td.Out)
			}
		} else {
			d.incomplete++
		}
		if len(d.outbox) >= maxOutbox {
			d.outbox = d.outbox[1:]
			d.droppedOutbox++
		}
		d.outbox = append(d.outbox, cd)
	}
	d.mu.Unlock()
	if len(events) > 0 {
		select {
		case d.deliver <- struct{}{}:
		default:
		}
	}
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

type tvKey struct {
	table uint32
	vnode uint16
}

// compute builds the delta of one event against v and the retired files,
// and drops its inputs from the retired files.
func (d *deltaState) compute(ev compactionEvent, v *Version) CompactionDelta {
	cd := CompactionDelta{JobID: ev.jobID, Reason: ev.reason, Inputs: ev.inputs, Outputs: ev.outputs}
	moved := map[uint64]bool{}
	for _, in := range ev.inputs {
		for _, out := range ev.outputs {
			if in.FileNum == out.FileNum {
				moved[in.FileNum] = true
			}
		}
	}
	vnodes := map[tvKey]*Delta{}
	tables := map[uint32]*TableDelta{}
	apply := func(files []CompactionFile, sign int64) {
		for _, cf := range files {
			if moved[cf.FileNum] {
				continue
			}
			f := d.lookup(v, cf.FileNum)
			if sign < 0 && f != nil && v.liveFile(cf.FileNum) != nil {
				// Still live after maxDeferrals refreshes: not known to
				// have left, so not counted.
				f = nil
			}
			if f == nil {
				cd.Missing = append(cd.Missing, cf.FileNum)
				continue
			}
			s := f.info.Summary
			k := 0
			for i := range s.Tables {
				ts := &s.Tables[i]
				td := tables[ts.Table]
				if td == nil {
					td = &TableDelta{Table: ts.Table}
					tables[ts.Table] = td
				}
				for j := range ts.Vnodes {
					c := ts.Vnodes[j].Counts
					c.ValueBytes = f.values[k]
					k++
					key := tvKey{ts.Table, ts.Vnodes[j].Vnode}
					vd := vnodes[key]
					if vd == nil {
						vd = &Delta{}
						vnodes[key] = vd
					}
					vd.add(c, sign)
					td.Delta.add(c, sign)
					if sign < 0 {
						td.In.Add(c)
					} else {
						td.Out.Add(c)
					}
				}
			}
		}
	}
	apply(ev.inputs, -1)
	apply(ev.outputs, +1)
	for _, in := range ev.inputs {
		if !moved[in.FileNum] {
			delete(d.retired, in.FileNum)
		}
	}
	for key, vd := range vnodes {
		if !vd.IsZero() {
			td := tables[key.table]
			td.Vnodes = append(td.Vnodes, VnodeDelta{Vnode: key.vnode, Delta: *vd})
		}
	}
	for _, td := range tables {
		slices.SortFunc(td.Vnodes, func(a, b VnodeDelta) int { return int(a.Vnode) - int(b.Vnode) })
		cd.Tables = append(cd.Tables, *td)
	}
	slices.SortFunc(cd.Tables, func(a, b TableDelta) int { return cmp.Compare(uint64(a.Table), uint64(b.Table)) })
	return cd
}

// deliverDeltas sends the outbox to the subscribers; it runs on the
// tracker's goroutine.
func (t *Tracker) deliverDeltas() {
	d := &t.deltas
	d.mu.Lock()
	out := d.outbox
	d.outbox = nil
	d.mu.Unlock()
	if len(out) == 0 {
		return
	}
	var dropped uint64
	d.subMu.Lock()
	for _, cd := range out {
		for s := range d.subs {
			select {
			case s.ch <- cd:
			default:
				dropped++
			}
		}
	}
	d.subMu.Unlock()
	if dropped > 0 {
		d.mu.Lock()
		d.droppedSubs += dropped
		d.mu.Unlock()
	}
}

// SubscribeCompactions returns a channel that receives the delta of every
// Pebble compaction that finishes from now on, in order, sent by the
// tracker's background goroutine (Start). buffer is the channel's capacity
// (at least 1); a delta that finds it full is dropped for this subscriber and
// counted in lsmstats_compaction_deltas_dropped_total. cancel ends the
// subscription and closes the channel; Close closes it too. Safe for
// concurrent use.
func (t *Tracker) SubscribeCompactions(buffer int) (deltas <-chan CompactionDelta, cancel func()) {
	s := &subscriber{ch: make(chan CompactionDelta, max(buffer, 1))}
	d := &t.deltas
	d.subMu.Lock()
	defer d.subMu.Unlock()
	if d.subsClosed {
		close(s.ch)
		return s.ch, func() {}
	}
	d.subs[s] = struct{}{}
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			d.subMu.Lock()
			defer d.subMu.Unlock()
			if _, ok := d.subs[s]; ok {
				delete(d.subs, s)
				close(s.ch)
			}
		})
	}
}

// closeSubscribers closes every subscriber's channel (at Close).
func (d *deltaState) closeSubscribers() {
	d.subMu.Lock()
	defer d.subMu.Unlock()
	for s := range d.subs {
		close(s.ch)
	}
	clear(d.subs)
	d.subsClosed = true
}

// CompactionStats are cumulative counts of the compaction deltas a Tracker
// computed.
type CompactionStats struct {
	// Complete and Incomplete count the deltas (failed compactions have
	// none; moves count, with empty deltas).
	Complete, Incomplete uint64
	// DroppedEvents are events lost before resolution (queue full),
	// DroppedOutbox deltas lost before delivery (no goroutine draining), and
	// DroppedSubscriber deliveries that found a subscriber's channel full.
	DroppedEvents, DroppedOutbox, DroppedSubscriber uint64
}

// CompactionStats returns the cumulative delta counts.
func (t *Tracker) CompactionStats() CompactionStats {
	d := &t.deltas
	d.mu.Lock()
	defer d.mu.Unlock()
	return CompactionStats{
		Complete: d.complete, Incomplete: d.incomplete,
		DroppedEvents: d.droppedEvents, DroppedOutbox: d.droppedOutbox, DroppedSubscriber: d.droppedSubs,
	}
}

// CompactionCollector returns a Prometheus collector of the tracker's
// compaction deltas (register it with a prometheus.Registerer). opts gives
// the namespace (default "lsmstats") and constant labels, as for NewMetrics,
// so that several stores can register theirs in one registry; its Now is
// not used. The metrics, with the default namespace:
//
//	lsmstats_compactions_total{complete}                        deltas computed
//	lsmstats_compaction_entries_total{table,side}               MVCC entries in compaction inputs / outputs
//	lsmstats_compaction_mvcc_deletes_total{table,side}          MVCC deletes in inputs / outputs
//	lsmstats_compaction_pebble_tombstones_total{table,side}     Pebble tombstones in inputs / outputs
//	lsmstats_compaction_key_bytes_total{table,side}             key bytes in inputs / outputs
//	lsmstats_compaction_deltas_dropped_total{reason}            events or deltas lost
//
// side is "input" or "output"; a table's change is output − input (rate()
// of each, then subtract). Only complete deltas are summed. Moves add
// nothing.
func (t *Tracker) CompactionCollector(opts *MetricsOptions) prometheus.Collector {
	o := opts.withDefaults()
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return o.desc("", name, help, labels...)
	}
	return &compactionCollector{
		t: t,
		compactions: desc("compactions_total",
			"Pebble compactions whose statistics delta the tracker computed, by whether every file's summary was known.",
			"complete"),
		entries: desc("compaction_entries_total",
			"MVCC entries (versions and MVCC deletes) in the input and output SSTs of Pebble compactions, per table.",
			"table", "side"),
		deletes: desc("compaction_mvcc_deletes_total",
			"MVCC delete entries in the input and output SSTs of Pebble compactions, per table.",
			"table", "side"),
		tombstones: desc("compaction_pebble_tombstones_total",
			"Pebble point tombstones (written by MVCC GC) in the input and output SSTs of Pebble compactions, per table.",
			"table", "side"),
		keyBytes: desc("compaction_key_bytes_total",
			"User key bytes of the MVCC entries in the input and output SSTs of Pebble compactions, per table.",
			"table", "side"),
		dropped: desc("compaction_deltas_dropped_total",
			"Compaction events or deltas lost: event queue full, outbox full, or a subscriber's channel full.",
			"reason"),
	}
}

type compactionCollector struct {
	t                                                            *Tracker
	compactions, entries, deletes, tombstones, keyBytes, dropped *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *compactionCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.compactions, c.entries, c.deletes, c.tombstones, c.keyBytes, c.dropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *compactionCollector) Collect(ch chan<- prometheus.Metric) {
	d := &c.t.deltas
	d.mu.Lock()
	complete, incomplete := d.complete, d.incomplete
	dropped := [3]uint64{d.droppedEvents, d.droppedOutbox, d.droppedSubs}
	ids := make([]uint32, 0, len(d.tables))
	ios := make(map[uint32]tableIO, len(d.tables))
	for id, io := range d.tables {
		ids = append(ids, id)
		ios[id] = *io
	}
	d.mu.Unlock()
	slices.Sort(ids)
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.compactions, complete, "true")
	counter(c.compactions, incomplete, "false")
	for _, id := range ids {
		io := ios[id]
		table := strconv.FormatUint(uint64(id), 10)
		for _, side := range []struct {
			name string
			c    sstsummary.Counts
		}{{"input", io.in}, {"output", io.out}} {
			counter(c.entries, side.c.Entries, table, side.name)
			counter(c.deletes, side.c.Deletes, table, side.name)
			counter(c.tombstones, side.c.PebbleTombstones, table, side.name)
			counter(c.keyBytes, side.c.KeyBytes, table, side.name)
		}
	}
	counter(c.dropped, dropped[0], "event_queue_full")
	counter(c.dropped, dropped[1], "outbox_full")
	counter(c.dropped, dropped[2], "subscriber_full")
}
