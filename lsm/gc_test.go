package lsm

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/compactiondelta"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

var gcModelSteps = flag.Int("gc-model-steps", 400, "steps of TestGCModel")

// churn drives one table with testutil.Churn, one epoch per commit, and
// keeps every committed version in a model. It is shared by the GC tests
// and benchmarks.
type churn struct {
	t     testing.TB
	s     *Store
	def   TableDef
	w     *Writer
	gen   *testutil.Churn
	epoch uint64
	// live is the committed state (gen's rows: every epoch is committed
	// as it is written).
	live map[uint64]string
	hist map[uint64][]modelVersion
}

func newChurn(t testing.TB, s *Store, def TableDef, seed uint64) *churn {
	require.NoError(t, s.CreateTable(def))
	d, err := s.Table(def.ID)
	require.NoError(t, err)
	w, err := s.NewWriter(def.ID, nil, nil)
	require.NoError(t, err)
	gen := testutil.NewChurn(seed, d.VnodeOf)
	return &churn{t: t, s: s, def: d, w: w, gen: gen, epoch: s.EpochFloor(), live: gen.Live(), hist: map[uint64][]modelVersion{}}
}

// step writes n ops in one epoch and commits it: updPct% updates and
// delPct% deletes of live rows, inserts of new pks otherwise.
func (c *churn) step(n, updPct, delPct int) {
	c.epoch++
	ops, err := c.gen.Write(c.w, c.epoch, n, updPct, delPct)
	require.NoError(c.t, err)
	require.NoError(c.t, c.w.Seal(c.epoch))
	require.NoError(c.t, c.s.Commit(c.epoch))
	last := map[uint64]testutil.ChurnOp{} // the epoch's last op of each pk
	for _, op := range ops {
		last[op.PK] = op
	}
	for pk, op := range last {
		c.hist[pk] = append(c.hist[pk], modelVersion{epoch: c.epoch, live: op.Kind != testutil.OpDelete, row: op.Row})
	}
}

// at returns the model's rows at epoch.
func (c *churn) at(epoch uint64) map[uint64]string {
	out := map[uint64]string{}
	for pk, vs := range c.hist {
		var cur modelVersion
		for _, v := range vs {
			if v.epoch > epoch {
				break
			}
			cur = v
		}
		if cur.live {
			out[pk] = cur.row
		}
	}
	return out
}

// readAt reads every row of a table at epoch through a pin.
func readAt(t testing.TB, s *Store, def TableDef, epoch uint64) map[uint64]string {
	sn, err := s.Pin(epoch)
	require.NoError(t, err)
	defer sn.Close()
	return readSnap(t, sn, def)
}

func readSnap(t testing.TB, sn *Snapshot, def TableDef) map[uint64]string {
	return readSnapVnodes(t, sn, def, 0, def.VnodeCount)
}

// readSnapVnodes reads the rows of vnodes [lo, hi) of a table of uint64
// pks at the snapshot, by pk.
func readSnapVnodes(t testing.TB, sn *Snapshot, def TableDef, lo, hi int) map[uint64]string {
	out := map[uint64]string{}
	for v := lo; v < hi; v++ {
		it, err := sn.NewIter(def.ID, uint16(v), nil, nil)
		require.NoError(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			pk, _, err := keys.DecodeUint64(it.PK())
			require.NoError(t, err)
			out[pk] = string(it.Row())
		}
		require.NoError(t, it.Close())
	}
	return out
}

// rawVersion is one version key as Pebble holds it.
type rawVersion struct {
	key    []byte
	prefix string
	v      keys.Version
	kind   byte
}

func (rv rawVersion) String() string {
	k, _ := keys.Decode(rv.key)
	return k.String()
}

// rawVersions lists every version key of a table in key order.
func rawVersions(t testing.TB, s *Store, table uint32) []rawVersion {
	lo, hi := keys.TableSpan(table)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	require.NoError(t, err)
	defer it.Close()
	var out []rawVersion
	for ok := it.First(); ok; ok = it.Next() {
		k, err := keys.Decode(it.Key())
		require.NoError(t, err)
		key := slices.Clone(it.Key())
		out = append(out, rawVersion{key: key, prefix: string(key[:keys.Split(key)]), v: k.Version, kind: k.Kind})
	}
	require.NoError(t, it.Error())
	return out
}

// expectAfterGC applies the GC rule, written independently of gc.go, to
// the prefixes of raw in [lower, upper): per prefix (newest first) keep the
// versions above safe, keep the newest version at or below safe if it is a
// put, drop the rest.
func expectAfterGC(raw []rawVersion, safe uint64, lower, upper []byte) []rawVersion {
	var out []rawVersion
	headSeen := map[string]bool{}
	for _, rv := range raw {
		in := rv.prefix >= string(lower) && (upper == nil || rv.prefix < string(upper))
		switch {
		case !in, rv.v.Epoch() > safe:
			out = append(out, rv)
		case !headSeen[rv.prefix]:
			headSeen[rv.prefix] = true
			if rv.kind == keys.KindPut {
				out = append(out, rv)
			}
		}
	}
	return out
}

func requireSameRaw(t testing.TB, want, got []rawVersion, msg string) {
	w := make([]string, len(want))
	for i := range want {
		w[i] = want[i].String()
	}
	g := make([]string, len(got))
	for i := range got {
		g[i] = got[i].String()
	}
	require.Equal(t, w, g, msg)
}

// requireEntriesEqualLive checks acceptance 1's end state for every vnode:
// physical entries == puts == live rows, no MVCC delete, no Pebble
// tombstone.
func requireEntriesEqualLive(t testing.TB, s *Store, def TableDef) {
	st := s.Stats()
	for v := 0; v < def.VnodeCount; v++ {
		phys, live := st.Physical.Vnode(def.ID, uint16(v)), st.Live.Vnode(def.ID, uint16(v))
		require.Equal(t, uint64(live.Rows), phys.Entries, "vnode %d: entries %+v, live %+v", v, phys, live)
		require.Equal(t, phys.Entries, phys.Puts, "vnode %d", v)
		require.Zero(t, phys.Deletes, "vnode %d", v)
		require.Zero(t, phys.PebbleTombstones, "vnode %d", v)
	}
}

// TestGCEntriesEqualLiveRows is acceptance 1: a workload with 30% updates
// and 30% deletes, one GC pass at safe epoch = committed epoch, a
// compaction of the range to the bottom level with no Pebble snapshot open:
// physical entries == live rows in every vnode, exactly.
func TestGCEntriesEqualLiveRows(t *testing.T) {
	seed := testSeed(t)
	s, err := Open(t.TempDir(), &Options{MemoryWatermark: 64 << 10, Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	def := TableDef{ID: 1, VnodeCount: 16, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, seed)
	for range 4 {
		c.step(1500, 0, 0) // the initial rows
	}
	for range 40 {
		c.step(400, 30, 30)
	}
	before := s.Stats().Physical.Table(1).Counts
	live := s.Stats().Live.Table(1)
	require.Greater(t, before.Entries, uint64(live.Rows)+1000, "the workload must leave garbage")
	require.Positive(t, before.Deletes)
	require.Equal(t, s.CommittedEpoch(), s.SafeEpoch())

	res, err := s.GC(context.Background(), GCRequest{Table: 1})
	require.NoError(t, err)
	require.Equal(t, s.CommittedEpoch(), res.SafeEpoch)
	require.Nil(t, res.Resume)
	require.Equal(t, int64(before.Entries), res.Examined)
	require.Equal(t, int64(before.Entries)-live.Rows, res.Deleted, "every version but the live heads")
	mid := s.Stats().Physical.Table(1).Counts
	require.Equal(t, uint64(res.Deleted), mid.PebbleTombstones, "GC's SINGLEDELs are counted apart")
	require.Equal(t, before.Entries, mid.Entries, "entries drop only at compaction")
	require.Equal(t, s.CommittedEpoch(), s.GCEpoch())

	require.NoError(t, s.CompactRange(context.Background(), 1, 0, 0))
	requireEntriesEqualLive(t, s, def)
	require.Equal(t, c.live, readAt(t, s, def, s.CommittedEpoch()))
	for _, rv := range rawVersions(t, s, 1) {
		require.Equal(t, keys.KindPut, rv.kind, "%s", rv)
	}
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
	t.Logf("entries %d -> %d (live rows %d), deleted %d versions, %d ingestions",
		before.Entries, s.Stats().Physical.Table(1).Counts.Entries, live.Rows, res.Deleted, res.Ingestions)
}

// TestGCModel is acceptance 2: random writes (with spills), commits, pins,
// GC passes over random vnode ranges at random safe epochs (resumed in
// pieces, some abandoned), compactions and crashes, checked against the
// model after every step: reads at every pinned epoch are the same before
// and after GC and equal the model, reads at random readable epochs equal
// the model, Pebble's versions are exactly what the GC rule leaves, and no
// pin below the watermark is granted.
func TestGCModel(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 5))
	dir := t.TempDir()
	def := TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}
	open := func() *Store {
		s, err := Open(dir, &Options{MemoryWatermark: int64(2048 + r.IntN(8192)), Logger: QuietLogger(nil)})
		require.NoError(t, err)
		return s
	}
	s := open()
	defer func() { _ = s.Close() }()
	c := newChurn(t, s, def, seed)
	c.gen.RowLen = 8
	pins := map[*Snapshot]map[uint64]string{}
	ctx := context.Background()
	var passes, deleted, resumed, refused int64

	checkPins := func(when string) {
		for sn, want := range pins {
			require.Equal(t, want, readSnap(t, sn, def), "%s: rows at pinned epoch %d", when, sn.Epoch())
		}
	}
	checkReadable := func() {
		lo, hi := s.GCEpoch(), s.CommittedEpoch()
		e := lo + uint64(r.Int64N(int64(hi-lo)+1))
		require.Equal(t, c.at(e), readAt(t, s, def, e), "rows at epoch %d (watermark %d, committed %d)", e, lo, hi)
	}

	for step := 0; step < *gcModelSteps; step++ {
		switch p := r.IntN(100); {
		case p < 40:
			c.step(1+r.IntN(30), 30, 30)
		case p < 55: // pin a readable epoch
			lo, hi := s.GCEpoch(), s.CommittedEpoch()
			e := lo + uint64(r.Int64N(int64(hi-lo)+1))
			sn, err := s.Pin(e)
			require.NoError(t, err)
			pins[sn] = c.at(e)
			require.Equal(t, pins[sn], readSnap(t, sn, def), "rows at new pin %d", e)
		case p < 60: // a pin below the watermark is refused
			if wm := s.GCEpoch(); wm > 0 {
				_, err := s.Pin(uint64(r.Int64N(int64(wm))))
				require.True(t, errors.Is(err, ErrEpochUnavailable), "%v", err)
				refused++
			}
		case p < 68: // release a pin
			for sn := range pins {
				sn.Close()
				delete(pins, sn)
				break
			}
		case p < 88: // a GC pass, maybe in pieces, maybe abandoned
			lo := r.IntN(def.VnodeCount)
			hi := lo + 1 + r.IntN(def.VnodeCount-lo)
			req := GCRequest{Table: 1, VnodeLo: lo, VnodeHi: hi, BatchSize: 1 + r.IntN(40)}
			if r.IntN(3) == 0 {
				req.SafeEpoch = uint64(r.Int64N(int64(s.CommittedEpoch()) + 1))
			}
			if r.IntN(2) == 0 {
				req.MaxVersions = int64(1 + r.IntN(60))
			}
			safe := s.SafeEpoch()
			if req.SafeEpoch != 0 {
				safe = min(safe, req.SafeEpoch)
			}
			wmBefore := s.GCEpoch()
			raw := rawVersions(t, s, 1)
			lower, upper, err := s.gcRange(1, lo, hi)
			require.NoError(t, err)
			var res GCResult
			for pieces := 0; ; pieces++ {
				res, err = s.GC(ctx, req)
				require.NoError(t, err)
				require.Equal(t, safe, res.SafeEpoch)
				passes++
				deleted += res.Deleted
				if res.Resume == nil || r.IntN(4) == 0 {
					break
				}
				resumed++
				req.Start = res.Resume
			}
			end := upper
			if res.Resume != nil {
				end = res.Resume
			}
			requireSameRaw(t, expectAfterGC(raw, safe, lower, end), rawVersions(t, s, 1),
				fmt.Sprintf("step %d: versions after GC of vnodes [%d, %d) at %d up to %x", step, lo, hi, safe, end))
			require.GreaterOrEqual(t, s.GCEpoch(), wmBefore)
			require.LessOrEqual(t, s.GCEpoch(), max(wmBefore, safe))
			checkPins("after GC")
			checkReadable()
		case p < 93:
			lo := r.IntN(def.VnodeCount)
			raw := rawVersions(t, s, 1)
			require.NoError(t, s.CompactRange(ctx, 1, lo, lo+1+r.IntN(def.VnodeCount-lo)))
			requireSameRaw(t, raw, rawVersions(t, s, 1), "compaction changes no version")
			checkPins("after compaction")
		case p < 96: // crash or reopen: the watermark is durable, pins go
			wm := s.GCEpoch()
			if r.IntN(2) == 0 {
				crashForTest(s)
			} else {
				require.NoError(t, s.Close())
			}
			clear(pins)
			s = open()
			c.s = s
			require.Equal(t, wm, s.GCEpoch(), "the watermark survives a restart")
			var err error
			c.w, err = s.NewWriter(1, nil, nil)
			require.NoError(t, err)
			c.epoch = s.EpochFloor()
			checkReadable()
		default:
			checkReadable()
			rep, err := s.Verify()
			require.NoError(t, err)
			require.Empty(t, rep.Differences, "step %d", step)
		}
	}
	for sn := range pins {
		sn.Close()
	}
	// A last full pass at the committed epoch and a compaction leave one
	// put per live row.
	_, err := s.GC(ctx, GCRequest{Table: 1})
	require.NoError(t, err)
	require.NoError(t, s.CompactRange(ctx, 1, 0, 0))
	requireEntriesEqualLive(t, s, def)
	require.Equal(t, c.live, readAt(t, s, def, s.CommittedEpoch()))
	t.Logf("%d passes (%d resumed pieces), %d versions deleted, %d pins refused, committed epoch %d, watermark %d",
		passes, resumed, deleted, refused, s.CommittedEpoch(), s.GCEpoch())
}

// TestGCPacingAndCancel: the limiter paces examined versions, and a
// cancelled pass returns where to resume without losing anything.
func TestGCPacingAndCancel(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 1)
	c.step(400, 0, 0)
	for range 4 {
		c.step(200, 50, 20)
	}
	total := s.Stats().Physical.Table(1).Counts.Entries

	// 10 tokens/s with a burst of 10: a pass over hundreds of versions
	// cannot finish within 50ms.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	res, err := s.GC(ctx, GCRequest{Table: 1, Limiter: rate.NewLimiter(10, 10), BatchSize: 5})
	require.Error(t, err)
	require.NotNil(t, res.Resume)
	require.Less(t, res.Examined, int64(total))
	require.Equal(t, c.live, readAt(t, s, def, s.CommittedEpoch()))

	// Resume without pacing: the range finishes.
	res2, err := s.GC(context.Background(), GCRequest{Table: 1, Start: res.Resume})
	require.NoError(t, err)
	require.Nil(t, res2.Resume)
	require.NoError(t, s.CompactRange(context.Background(), 1, 0, 0))
	requireEntriesEqualLive(t, s, def)
	require.Equal(t, c.live, readAt(t, s, def, s.CommittedEpoch()))
}

// TestGCBadInput: every malformed request is refused with a clear error and
// changes nothing.
func TestGCBadInput(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 1)
	c.step(50, 0, 0)
	ctx := context.Background()
	for _, req := range []GCRequest{
		{Table: 2},
		{Table: 1, VnodeLo: 3, VnodeHi: 3},
		{Table: 1, VnodeLo: -1},
		{Table: 1, VnodeHi: 5},
		{Table: 1, Start: []byte{0, 0, 0, 2}},
		{Table: 1, VnodeLo: 2, Start: keys.AppendVnodeBound(nil, 1, 1)},
		{Table: 1, BatchSize: -1},
	} {
		_, err := s.GC(ctx, req)
		require.Error(t, err, "%+v", req)
	}
	require.Error(t, s.CompactRange(ctx, 1, 2, 1))
	require.Zero(t, s.Metrics().GCPasses)
	require.NoError(t, s.Close())
	_, err = s.GC(ctx, GCRequest{Table: 1})
	require.True(t, errors.Is(err, ErrClosed), "%v", err)
	require.True(t, errors.Is(s.CompactRange(ctx, 1, 0, 0), ErrClosed))
}

// TestGCCompactionDeltas: the compaction deltas of package stats see GC's
// work: compacting a GC'd range removes exactly the deleted versions and
// their SINGLEDELs.
func TestGCCompactionDeltas(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil), Pebble: func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
	}})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	def := TableDef{ID: 1, VnodeCount: 8, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 3)
	c.step(600, 0, 0)
	for range 6 {
		c.step(200, 30, 30)
	}
	deltas, cancel := s.tracker.SubscribeCompactions(1024)
	defer cancel()
	before := s.Stats().Physical
	res, err := s.GC(context.Background(), GCRequest{Table: 1})
	require.NoError(t, err)
	require.NoError(t, s.CompactRange(context.Background(), 1, 0, 0))
	after := s.Stats().Physical

	var sum compactiondelta.Delta
	perVnode := map[uint16]compactiondelta.Delta{}
	for got := 0; ; got++ {
		// Pebble ran every compaction before CompactRange returned; the
		// deltas follow the refresh that CompactRange made.
		cs := s.tracker.CompactionStats()
		if got == int(cs.Complete+cs.Incomplete) {
			break
		}
		var d compactiondelta.Compaction
		select {
		case d = <-deltas:
		case <-time.After(10 * time.Second):
			t.Fatalf("delta %d of %d never arrived", got+1, cs.Complete+cs.Incomplete)
		}
		// An intermediate output that the tracker never listed is missing
		// from the compactions that made and consumed it alike: the sums
		// below hold for incomplete deltas too.
		if td, ok := d.Table(1); ok {
			sum.Entries += td.Entries
			sum.PebbleTombstones += td.PebbleTombstones
			for _, vd := range td.Vnodes {
				x := perVnode[vd.Vnode]
				x.Entries += vd.Entries
				x.PebbleTombstones += vd.PebbleTombstones
				perVnode[vd.Vnode] = x
			}
		}
	}
	require.Equal(t, -res.Deleted, sum.Entries, "compactions removed the GC'd versions (%+v)", s.tracker.CompactionStats())
	require.Equal(t, -res.Deleted, sum.PebbleTombstones, "and their SINGLEDELs")
	for v := range def.VnodeCount {
		b, a := before.Vnode(1, uint16(v)), after.Vnode(1, uint16(v))
		require.Equal(t, int64(a.Entries)-int64(b.Entries), perVnode[uint16(v)].Entries, "vnode %d", v)
	}
	requireEntriesEqualLive(t, s, def)
}

// TestGCRefusesPinsDuringPass: once a pass has fixed its safe epoch, a pin
// below it is refused even before the pass's first ingestion raised the
// watermark, and pins at or above it are granted.
func TestGCRefusesPinsDuringPass(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 2)
	for range 5 {
		c.step(50, 40, 20)
	}
	committed := s.CommittedEpoch()
	var checked int
	s.hooks.phase = func(p string) {
		if p != "gc-scanning" || checked > 0 {
			return
		}
		checked++
		require.Zero(t, s.GCEpoch(), "nothing ingested yet")
		_, err := s.Pin(committed - 1)
		require.True(t, errors.Is(err, ErrEpochUnavailable), "pin below the pass's safe epoch: %v", err)
		sn, err := s.Snapshot()
		require.NoError(t, err)
		sn.Close()
	}
	res, err := s.GC(context.Background(), GCRequest{Table: 1})
	require.NoError(t, err)
	require.Equal(t, 1, checked)
	require.Positive(t, res.Deleted)
	require.Equal(t, committed, s.GCEpoch())
	// A pass below a pin: the pin's rows stay.
	sn, err := s.Pin(committed)
	require.NoError(t, err)
	defer sn.Close()
	c.step(60, 40, 30)
	res, err = s.GC(context.Background(), GCRequest{Table: 1})
	require.NoError(t, err)
	require.Equal(t, committed, res.SafeEpoch)
	require.Equal(t, c.at(committed), readSnap(t, sn, def))
}

// TestGCCloseCancels: Close stops a slowly paced pass promptly; the pass
// reports ErrClosed and where to resume, and nothing is lost.
func TestGCCloseCancels(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	c := newChurn(t, s, def, 4)
	c.step(300, 0, 0)
	c.step(300, 50, 30)
	type result struct {
		res GCResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.GC(context.Background(), GCRequest{Table: 1, Limiter: rate.NewLimiter(20, 5)})
		done <- result{res, err}
	}()
	for s.Metrics().GCPasses == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	require.NoError(t, s.Close())
	require.Less(t, time.Since(start), 2*time.Second)
	r := <-done
	require.True(t, errors.Is(r.err, ErrClosed), "%v", r.err)
	require.NotNil(t, r.res.Resume)
	s, err = Open(dir, &Options{Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	require.Equal(t, c.live, readAt(t, s, def, s.CommittedEpoch()))
}
