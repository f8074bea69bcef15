package ssttracker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/compactiondelta"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// deltaFile builds a live file from datadriven-style ops.
func deltaFile(t testing.TB, num uint64, ops string) *liveFile {
	parsed := physParseOps(t, ops)
	s := physCollect(t, parsed)
	return newLiveFile(FileInfo{FileNum: num, BackingNum: num, Summary: s, NumEntries: s.PointKeys(), RawValueSize: 100 * s.Puts()})
}

// TestCompactionDeltaUnit resolves events against synthetic Versions: a
// rewrite (inputs minus outputs, per vnode), a move (empty), an input that
// an earlier refresh already retired, a file never seen (Missing), and only
// the events queued before the refresh.
func TestCompactionDeltaUnit(t *testing.T) {
	f1 := deltaFile(t, 1, "put 1 0 1 9\nput 1 0 1 8\nput 1 0 2 8\nput 1 3 7 5")
	f2 := deltaFile(t, 2, "gcdel 1 0 1 8\ngcdel 1 0 2 8\nput 2 0 4 1")
	f3 := deltaFile(t, 3, "put 1 0 1 9\nput 1 3 7 5\nput 2 0 4 1") // f1+f2 compacted
	f4 := deltaFile(t, 4, "put 1 5 1 1")

	var d deltaState
	d.init()
	// The resolved deltas, as a subscriber receives them.
	deltas, cancel := d.feed.Subscribe(100)
	defer cancel()
	var delivered []compactiondelta.Compaction
	outbox := func() []compactiondelta.Compaction {
		d.feed.Deliver()
		for {
			select {
			case cd := <-deltas:
				delivered = append(delivered, cd)
			default:
				return delivered
			}
		}
	}
	v0 := physVersionOf(&Version{}, []*liveFile{f1, f2, f4}, nil, []*liveFile{f1, f2, f4})
	v1 := physVersionOf(v0, []*liveFile{f3}, []*liveFile{f1, f2}, []*liveFile{f3, f4})

	ev := func(job int, in []uint64, out []uint64) compactionEvent {
		e := compactionEvent{jobID: job, reason: "test"}
		for _, n := range in {
			e.inputs = append(e.inputs, compactiondelta.File{FileNum: n})
		}
		for _, n := range out {
			e.outputs = append(e.outputs, compactiondelta.File{FileNum: n, Level: 6})
		}
		return e
	}
	// The synthetic files are all listed at L0: the move of file 4 is to
	// L0 here (a move to L6 that v1 lists at L0 is a listing from before
	// the move, checked at the end).
	moveL0 := func(job int, num uint64) compactionEvent {
		e := ev(job, []uint64{num}, []uint64{num})
		e.outputs[0].Level = 0
		return e
	}
	d.pending = []compactionEvent{ev(1, []uint64{1, 2}, []uint64{3}), moveL0(2, 4), ev(3, []uint64{9}, []uint64{3})}
	// The refresh from v0 to v1 started when only the first two were
	// queued.
	require.False(t, d.resolve(2, v0, v1), "v1 lists both compactions' results")
	require.Len(t, d.pending, 1)
	require.Len(t, outbox(), 2)

	rw := outbox()[0]
	require.True(t, rw.Complete())
	t1, ok := rw.Table(1)
	require.True(t, ok)
	require.Equal(t, compactiondelta.Delta{Entries: -2, Puts: -2, KeyBytes: t1.Delta.KeyBytes, ValueBytes: t1.Delta.ValueBytes, PebbleTombstones: -2}, t1.Delta)
	require.Equal(t, int64(-2*len(physKey(1, 0, 1, 8, 1))), t1.Delta.KeyBytes)
	require.Equal(t, compactiondelta.Delta{Entries: -2, Puts: -2, KeyBytes: t1.Delta.KeyBytes, ValueBytes: t1.Vnode(0).ValueBytes, PebbleTombstones: -2}, t1.Vnode(0))
	require.True(t, t1.Vnode(3).IsZero(), "vnode 3 did not change")
	require.Len(t, t1.Vnodes, 1, "unchanged vnodes are left out")
	require.Equal(t, uint64(4), t1.In.Entries)
	require.Equal(t, uint64(2), t1.Out.Entries)
	t2, ok := rw.Table(2)
	require.True(t, ok)
	require.True(t, t2.Delta.IsZero(), "%+v", t2.Delta)
	require.NotContains(t, d.retired, uint64(1), "inputs are consumed")

	mv := outbox()[1]
	require.True(t, mv.Complete())
	require.Empty(t, mv.Tables, "a move changes nothing")

	// Job 3: an unknown input.
	d.resolve(1, v1, v1)
	miss := outbox()[2]
	require.False(t, miss.Complete())
	require.Equal(t, []uint64{9}, miss.Missing)
	require.Equal(t, compactiondelta.Stats{Complete: 2, Incomplete: 1}, d.feed.Stats())

	// An input retired by an earlier refresh is still found.
	f5 := deltaFile(t, 5, "put 1 5 1 1")
	v2 := physVersionOf(v1, []*liveFile{f5}, []*liveFile{f4}, []*liveFile{f3, f5})
	d.resolve(0, v1, v2) // another event's refresh saw the result first
	d.pending = append(d.pending, ev(4, []uint64{4}, []uint64{5}))
	d.resolve(1, v2, v2)
	late := outbox()[3]
	require.True(t, late.Complete(), "missing %v", late.Missing)
	t1, _ = late.Table(1)
	require.True(t, t1.Delta.IsZero())
	require.Equal(t, uint64(1), t1.In.Entries)

	// A listing that predates the compaction (Pebble publishes the read
	// state after CompactionEnd): the event waits, and so do later ones.
	f6 := deltaFile(t, 6, "put 1 0 1 9\nput 1 3 7 5")
	d.pending = append(d.pending, ev(5, []uint64{3}, []uint64{6}), moveL0(6, 5))
	require.True(t, d.resolve(2, v2, v2), "f3 is still listed: retry")
	require.Len(t, d.pending, 2)
	require.Len(t, outbox(), 4)
	v3 := physVersionOf(v2, []*liveFile{f6}, []*liveFile{f3}, []*liveFile{f5, f6})
	require.False(t, d.resolve(2, v2, v3))
	require.Empty(t, d.pending)
	require.Len(t, outbox(), 6)
	t1, _ = outbox()[4].Table(1)
	require.True(t, t1.Delta.IsZero(), "f6 keeps table 1's entries of f3")
	t2, _ = outbox()[4].Table(2)
	require.Equal(t, int64(-1), t2.Entries, "and drops its table 2 entry")

	// An input that never leaves the listing is, after maxDeferrals
	// refreshes, resolved as missing rather than counted.
	d.pending = append(d.pending, ev(7, []uint64{6}, []uint64{8}))
	for range maxDeferrals {
		require.True(t, d.resolve(1, v3, v3))
	}
	require.False(t, d.resolve(1, v3, v3))
	stuck := outbox()[6]
	require.Equal(t, []uint64{6, 8}, stuck.Missing)
	require.Empty(t, stuck.Tables)

	// A move to L6 that the listing still shows at L0 (the listing predates
	// the move): retry, until a listing shows the file at L6.
	d.pending = append(d.pending, ev(8, []uint64{5}, []uint64{5}))
	require.True(t, d.resolve(1, v3, v3), "f5 is listed above the level it moved to")
	f5moved := newLiveFile(FileInfo{FileNum: 5, BackingNum: 5, Level: 6, Summary: f5.info.Summary,
		NumEntries: f5.info.NumEntries, RawValueSize: f5.info.RawValueSize})
	v4 := physVersionOf(v3, []*liveFile{f5moved}, []*liveFile{f5}, []*liveFile{f5moved, f6})
	require.False(t, d.resolve(1, v3, v4))
	require.Empty(t, d.pending)
	require.Empty(t, outbox()[7].Tables, "a move changes nothing")
}

// TestCompactionDeltasSum: with the tracker's goroutine running, random
// batches are flushed (MVCC versions, GC SINGLEDELs, several tables and
// vnodes) and random key ranges compacted in between (small files, so each
// manual compaction chains through levels), then everything; the deltas of
// all compactions add up, per (table, vnode), to the final Version minus
// what the flushes wrote, and each delta reaches every subscriber once, in
// order. The sums hold even for incomplete deltas: every flushed file is
// read (a refresh follows each flush), so a file never read is an
// intermediate output, left out of the compaction that made it and of the
// one that consumed it alike.
func TestCompactionDeltasSum(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := physRand(t)
	e := openPhys(t, func(o *pebble.Options) {
		o.TargetFileSizes[0] = 4 << 10
	})
	e.tr.Start()
	subA, cancelA := e.tr.SubscribeCompactions(4096)
	subB, cancelB := e.tr.SubscribeCompactions(4096)
	defer cancelA()
	type tv struct {
		table uint32
		vnode uint16
	}
	flushed := map[tv]sstsummary.Counts{}
	written := map[string]bool{}
	gced := map[string]bool{}
	var keysWritten []physOp
	for f := 0; f < 12; f++ {
		var batch []physOp
		seen := map[string]bool{}
		for range 100 + r.IntN(300) {
			table, vnode, pk := uint32(1+r.IntN(2)), uint16(r.IntN(8)), uint64(r.IntN(300))
			k := physKey(table, vnode, pk, uint64(10*f+1+r.IntN(9)), 1)
			if !seen[string(k)] {
				seen[string(k)] = true
				batch = append(batch, physOp{key: k, kind: pebble.InternalKeyKindSet, val: physValue(100)})
			}
			if len(keysWritten) > 0 && r.IntN(4) == 0 {
				// A GC SINGLEDEL of a version an earlier flush wrote, once.
				old := keysWritten[r.IntN(len(keysWritten))].key
				if !gced[string(old)] {
					gced[string(old)] = true
					batch = append(batch, physOp{key: old, kind: pebble.InternalKeyKindSingleDelete})
				}
			}
		}
		e.applyBatch(batch)
		require.NoError(t, e.db.Flush())
		e.refresh()
		if r.IntN(2) == 0 {
			lo := keys.AppendVnodeBound(nil, uint32(1+r.IntN(2)), uint16(r.IntN(8)))
			require.NoError(t, e.db.Compact(context.Background(), lo, physEverything, true))
		}
		sorted := slices.Clone(batch)
		slices.SortFunc(sorted, func(a, b physOp) int { return keys.Compare(a.key, b.key) })
		fs := physCollect(t, sorted)
		for _, ts := range fs.Tables {
			for _, vs := range ts.Vnodes {
				c := flushed[tv{ts.Table, vs.Vnode}]
				c.Add(vs.Counts)
				flushed[tv{ts.Table, vs.Vnode}] = c
			}
		}
		for _, op := range batch {
			if op.kind == pebble.InternalKeyKindSet && !written[string(op.key)] {
				written[string(op.key)] = true
				keysWritten = append(keysWritten, op)
			}
		}
	}
	e.compactAll()
	// Wait until no compaction runs and every event is resolved.
	deadline := time.Now().Add(10 * time.Second)
	var v1 *Version
	for {
		require.True(t, time.Now().Before(deadline), "compactions never settled")
		v1 = e.check()
		if e.db.Metrics().Compact.NumInProgress == 0 && e.tr.deltas.pendingLen() == 0 && e.refresh() == v1 {
			break
		}
		time.Sleep(time.Millisecond)
	}

	sum := map[tv]compactiondelta.Delta{}
	jobs := 0
	for {
		cs := e.tr.CompactionStats()
		if jobs == int(cs.Complete+cs.Incomplete) {
			break
		}
		var d compactiondelta.Compaction
		select {
		case d = <-subA:
		case <-time.After(10 * time.Second):
			t.Fatalf("delta %d never arrived", jobs+1)
		}
		select {
		case b := <-subB:
			require.Equal(t, d.JobID, b.JobID, "both subscribers see the same order")
		case <-time.After(10 * time.Second):
			t.Fatalf("delta %d never reached the second subscriber", jobs+1)
		}
		jobs++
		for _, td := range d.Tables {
			var tot compactiondelta.Delta
			for _, vd := range td.Vnodes {
				x := sum[tv{td.Table, vd.Vnode}]
				x.Entries += vd.Entries
				x.Puts += vd.Puts
				x.Deletes += vd.Deletes
				x.KeyBytes += vd.KeyBytes
				x.PebbleTombstones += vd.PebbleTombstones
				sum[tv{td.Table, vd.Vnode}] = x
				tot.Entries += vd.Entries
				tot.PebbleTombstones += vd.PebbleTombstones
			}
			require.Equal(t, tot.Entries, td.Entries, "table delta is the sum of its vnodes")
			require.Equal(t, tot.PebbleTombstones, td.PebbleTombstones)
		}
	}
	require.Positive(t, jobs)
	cancelB()
	changed := 0
	for _, table := range []uint32{1, 2} {
		for v := range 8 {
			a, f := v1.Vnode(table, uint16(v)), flushed[tv{table, uint16(v)}]
			want := compactiondelta.Delta{
				Entries: int64(a.Entries) - int64(f.Entries), Puts: int64(a.Puts) - int64(f.Puts),
				Deletes: int64(a.Deletes) - int64(f.Deletes), KeyBytes: int64(a.KeyBytes) - int64(f.KeyBytes),
				PebbleTombstones: int64(a.PebbleTombstones) - int64(f.PebbleTombstones),
			}
			require.Equal(t, want, sum[tv{table, uint16(v)}], "table %d vnode %d", table, v)
			if !want.IsZero() {
				changed++
			}
		}
	}
	require.Positive(t, changed, "the compactions must change something")
	cs := e.tr.CompactionStats()
	t.Logf("%d compactions (%d complete), %d vnodes changed", jobs, cs.Complete, changed)

	// Prometheus: per-table input − output equals minus the summed deltas.
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(e.tr.CompactionCollector(metricDescs("lsmstats", nil))))
	require.Error(t, reg.Register(e.tr.CompactionCollector(metricDescs("lsmstats", nil))), "the same metrics twice")
	// Two stores' collectors in one registry, told apart by a constant
	// label, and a namespace of one's own.
	other := prometheus.NewPedanticRegistry()
	for _, store := range []string{"a", "b"} {
		require.NoError(t, other.Register(e.tr.CompactionCollector(metricDescs("x", prometheus.Labels{"store": store}))))
	}
	otherMFs, err := other.Gather()
	require.NoError(t, err)
	require.NotEmpty(t, otherMFs)
	for _, mf := range otherMFs {
		require.True(t, strings.HasPrefix(mf.GetName(), "x_compaction"), mf.GetName())
		stores := map[string]int{}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "store" {
					stores[lp.GetValue()]++
				}
			}
		}
		require.Equal(t, stores["a"], stores["b"], mf.GetName())
		require.Equal(t, len(mf.Metric), stores["a"]+stores["b"], mf.GetName())
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	metric := func(name string, labels map[string]string) float64 {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
		next:
			for _, m := range mf.Metric {
				for _, lp := range m.Label {
					if labels[lp.GetName()] != lp.GetValue() {
						continue next
					}
				}
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("no metric %s %v", name, labels)
		return 0
	}
	if cs.Incomplete == 0 {
		for _, table := range []string{"1", "2"} {
			var want compactiondelta.Delta
			for k, d := range sum {
				if fmt.Sprint(k.table) == table {
					want.Entries += d.Entries
					want.PebbleTombstones += d.PebbleTombstones
				}
			}
			in := metric("lsmstats_compaction_entries_total", map[string]string{"table": table, "side": "input"})
			out := metric("lsmstats_compaction_entries_total", map[string]string{"table": table, "side": "output"})
			require.Equal(t, float64(want.Entries), out-in, "table %s", table)
			in = metric("lsmstats_compaction_pebble_tombstones_total", map[string]string{"table": table, "side": "input"})
			out = metric("lsmstats_compaction_pebble_tombstones_total", map[string]string{"table": table, "side": "output"})
			require.Equal(t, float64(want.PebbleTombstones), out-in, "table %s", table)
		}
	}
	require.Equal(t, float64(cs.Complete), metric("lsmstats_compactions_total", map[string]string{"complete": "true"}))
	require.NoError(t, e.tr.Close())
	_, open := <-subA
	require.False(t, open, "Close closes the subscribers' channels")
	e.close()
}

// TestCompactionDeltaSubscribers: a full channel loses deltas (counted),
// never blocks the tracker; cancel and Close close channels once;
// subscribing after Close yields a closed channel.
func TestCompactionDeltaSubscribers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tr := NewTracker(TrackerConfig{})
	tr.Start()
	full, cancelFull := tr.SubscribeCompactions(1)
	gone, cancelGone := tr.SubscribeCompactions(1)
	cancelGone()
	cancelGone()
	_, open := <-gone
	require.False(t, open)
	for job := range 3 {
		tr.recordCompaction(pebble.CompactionInfo{JobID: job, Done: true})
	}
	tr.recordCompaction(pebble.CompactionInfo{JobID: 9, Done: true, Err: fmt.Errorf("failed")})
	tr.deltas.resolve(tr.deltas.pendingLen(), &Version{}, &Version{})
	deadline := time.Now().Add(10 * time.Second)
	for tr.CompactionStats().DroppedSubscriber < 2 {
		require.True(t, time.Now().Before(deadline), "deliveries never happened: %+v", tr.CompactionStats())
		time.Sleep(time.Millisecond)
	}
	d := <-full
	require.Equal(t, 0, d.JobID, "the first delta was delivered, the others dropped")
	require.Equal(t, compactiondelta.Stats{Complete: 3, DroppedSubscriber: 2}, tr.CompactionStats(), "the failed compaction has no delta")
	require.NoError(t, tr.Close())
	_, open = <-full
	require.False(t, open)
	cancelFull() // after Close: no double close
	late, _ := tr.SubscribeCompactions(1)
	_, open = <-late
	require.False(t, open)
}

// metricDescs names the compaction metrics as the store does: under a
// namespace, with constant labels.
func metricDescs(namespace string, constLabels prometheus.Labels) func(name, help string, labels ...string) *prometheus.Desc {
	return func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, "", name), help, labels, constLabels)
	}
}
