package compactiondelta

import (
	"slices"
	"strconv"
	"sync"

	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/prometheus/client_golang/prometheus"
)

// maxOutbox bounds the resolved deltas awaiting delivery.
const maxOutbox = 1024

// Stats are cumulative counts of the compaction deltas a Feed received.
type Stats struct {
	// Complete and Incomplete count the deltas (failed compactions have
	// none; moves count, with empty deltas).
	Complete, Incomplete uint64
	// DroppedEvents are events lost before resolution (queue full),
	// DroppedOutbox deltas lost before delivery (no goroutine draining), and
	// DroppedSubscriber deliveries that found a subscriber's channel full.
	DroppedEvents, DroppedOutbox, DroppedSubscriber uint64
}

// Feed delivers the deltas its owner publishes to subscribers, and keeps
// their cumulative per-table input and output counts for Prometheus.
// Publish queues deltas in an outbox and signals Ready; Deliver, which the
// owner calls from its own goroutine (never from Pebble's callback), sends
// each to every subscriber's channel without blocking: a subscriber whose
// buffer is full loses that delta, and the loss is counted. Create one with
// NewFeed; all methods are safe for concurrent use.
type Feed struct {
	mu     sync.Mutex
	outbox []Compaction
	// Cumulative counts, under mu.
	complete, incomplete                      uint64
	droppedEvents, droppedOutbox, droppedSubs uint64
	tables                                    map[uint32]*tableIO

	ready chan struct{}

	subMu      sync.Mutex
	subs       map[*subscriber]struct{}
	subsClosed bool
}

type subscriber struct {
	ch chan Compaction
}

// tableIO are the cumulative input and output counts of a table over the
// complete deltas.
type tableIO struct{ in, out sstsummary.Counts }

// NewFeed returns a feed without subscribers.
func NewFeed() *Feed {
	return &Feed{
		tables: map[uint32]*tableIO{},
		subs:   map[*subscriber]struct{}{},
		ready:  make(chan struct{}, 1),
	}
}

// Publish counts the deltas, in order, and queues them for delivery.
func (f *Feed) Publish(cds []Compaction) {
	if len(cds) == 0 {
		return
	}
	f.mu.Lock()
	for _, cd := range cds {
		if cd.Complete() {
			f.complete++
			for _, td := range cd.Tables {
				io := f.tables[td.Table]
				if io == nil {
					io = &tableIO{}
					f.tables[td.Table] = io
				}
				io.in.Add(td.In)
				io.out.Add(td.Out)
			}
		} else {
			f.incomplete++
		}
		if len(f.outbox) >= maxOutbox {
			f.outbox = f.outbox[1:]
			f.droppedOutbox++
		}
		f.outbox = append(f.outbox, cd)
	}
	f.mu.Unlock()
	select {
	case f.ready <- struct{}{}:
	default:
	}
}

// DropEvent counts a compaction event lost before it was resolved.
func (f *Feed) DropEvent() {
	f.mu.Lock()
	f.droppedEvents++
	f.mu.Unlock()
}

// Ready receives a value when Publish has queued deltas for Deliver.
func (f *Feed) Ready() <-chan struct{} { return f.ready }

// Deliver sends the queued deltas to the subscribers.
func (f *Feed) Deliver() {
	f.mu.Lock()
	out := f.outbox
	f.outbox = nil
	f.mu.Unlock()
	if len(out) == 0 {
		return
	}
	var dropped uint64
	f.subMu.Lock()
	for _, cd := range out {
		for s := range f.subs {
			select {
			case s.ch <- cd:
			default:
				dropped++
			}
		}
	}
	f.subMu.Unlock()
	if dropped > 0 {
		f.mu.Lock()
		f.droppedSubs += dropped
		f.mu.Unlock()
	}
}

// Subscribe returns a channel that receives every delta delivered from
// now on, in order. buffer is the channel's capacity (at least 1); a delta
// that finds it full is dropped for this subscriber and counted. cancel
// ends the subscription and closes the channel; Close closes it too.
func (f *Feed) Subscribe(buffer int) (deltas <-chan Compaction, cancel func()) {
	s := &subscriber{ch: make(chan Compaction, max(buffer, 1))}
	f.subMu.Lock()
	defer f.subMu.Unlock()
	if f.subsClosed {
		close(s.ch)
		return s.ch, func() {}
	}
	f.subs[s] = struct{}{}
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			f.subMu.Lock()
			defer f.subMu.Unlock()
			if _, ok := f.subs[s]; ok {
				delete(f.subs, s)
				close(s.ch)
			}
		})
	}
}

// Close closes every subscriber's channel; later subscriptions get a
// closed channel.
func (f *Feed) Close() {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	for s := range f.subs {
		close(s.ch)
	}
	clear(f.subs)
	f.subsClosed = true
}

// Stats returns the cumulative delta counts.
func (f *Feed) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{
		Complete: f.complete, Incomplete: f.incomplete,
		DroppedEvents: f.droppedEvents, DroppedOutbox: f.droppedOutbox, DroppedSubscriber: f.droppedSubs,
	}
}

// Collector returns a Prometheus collector of the feed's cumulative
// counts, whose descriptors desc names (under the caller's namespace and
// constant labels). The metrics, with the default namespace:
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
func (f *Feed) Collector(desc func(name, help string, labels ...string) *prometheus.Desc) prometheus.Collector {
	return &collector{
		f: f,
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

type collector struct {
	f                                                            *Feed
	compactions, entries, deletes, tombstones, keyBytes, dropped *prometheus.Desc
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.compactions, c.entries, c.deletes, c.tombstones, c.keyBytes, c.dropped} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	f := c.f
	f.mu.Lock()
	complete, incomplete := f.complete, f.incomplete
	dropped := [3]uint64{f.droppedEvents, f.droppedOutbox, f.droppedSubs}
	ids := make([]uint32, 0, len(f.tables))
	ios := make(map[uint32]tableIO, len(f.tables))
	for id, io := range f.tables {
		ids = append(ids, id)
		ios[id] = *io
	}
	f.mu.Unlock()
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
