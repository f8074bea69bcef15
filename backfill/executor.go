package backfill

import (
	"bytes"
	"context"
	"slices"
	"strconv"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/replicated"
	"golang.org/x/time/rate"
)

// ActorConfig configures one backfill actor.
type ActorConfig struct {
	ID    int
	Store *lsm.Store
	// Upstream, MV and State are table ids: the upstream table (read through
	// a replicated table), the MV the output is materialized into (same
	// schema and vnodes), and the backfill state table.
	Upstream, MV, State uint32
	// Vnodes are the actor's vnodes.
	Vnodes *roaring.Bitmap
	// Upstreams, if set, are the actor's upstream tables, each with its MV,
	// state table and the actor's vnodes of it (by index: VnodeState and
	// RowOp.Upstream); Upstream, MV, State and Vnodes must then be unset.
	// Without, the actor reads the one table Upstream.
	Upstreams []ActorUpstream
	// ChunkSize is the number of rows per output chunk; 0 means 256.
	ChunkSize int
	// BarrierRows is the number of snapshot rows read per barrier (at least
	// one, so that vnodes full of tombstones still progress); 0 means 2048.
	BarrierRows int
	// Limiter, if set, limits snapshot rows per second.
	Limiter *rate.Limiter
	// RowCount persists each vnode's row count (the row-count approach).
	RowCount bool
	// Reporter receives the actor's state at every barrier.
	Reporter *Reporter
	// Fixed makes the actor read every snapshot at FixedEpoch, which the
	// caller keeps pinned, instead of at the previous barrier's epoch: a
	// snapshot backfill's snapshot phase, in which it gets no upstream
	// chunks (they go to the log store) and so forwards none.
	Fixed      bool
	FixedEpoch uint64
	// Order is the order in which the actor reads its unfinished vnodes'
	// snapshot rows: VnodeOrder (the default) or Interleaved.
	Order SnapshotOrder
}

// SnapshotOrder is the order in which an actor reads the snapshot rows of
// its unfinished vnodes at a barrier. Either way each vnode is read in pk
// order from its cursor, and the forwarding rule is the same: what
// changes is which vnodes are in progress at a time.
type SnapshotOrder uint8

const (
	// VnodeOrder (the default) reads the vnodes one after another, each to
	// its end, in the actor's vnode order: the upstream is read in its
	// storage order, so a checkpoint's MV rows extend one vnode per actor,
	// as appends, and at most one vnode per actor is in progress. Each
	// checkpoint writes to a few vnodes instead of all of them: fewer
	// statistics buckets touched, MV SSTs that do not overlap, and one
	// sequential scan; a vnode not yet started forwards nothing, as in
	// Interleaved.
	VnodeOrder SnapshotOrder = iota
	// Interleaved reads one row of each unfinished vnode in turn, like
	// RisingWave's select_all over one stream per vnode: every vnode
	// advances together, and the MV receives rows of all of them at each
	// checkpoint. On an embedded store it costs about one and a half
	// times as much CPU per row (docs/design.md, "Snapshot order").
	Interleaved
)

func (o SnapshotOrder) String() string {
	switch o {
	case Interleaved:
		return "interleaved"
	case VnodeOrder:
		return "vnode"
	}
	return "SnapshotOrder(" + strconv.Itoa(int(o)) + ")"
}

// ParseSnapshotOrder returns the order a String names.
func ParseSnapshotOrder(s string) (SnapshotOrder, error) {
	for _, o := range []SnapshotOrder{VnodeOrder, Interleaved} {
		if s == o.String() {
			return o, nil
		}
	}
	return 0, errors.Newf("lsmstats/backfill: unknown snapshot order %q (vnode or interleaved)", s)
}

// MarshalText and UnmarshalText write and read the String form, for flags
// (flag.TextVar) and JSON.
func (o SnapshotOrder) MarshalText() ([]byte, error) {
	if !o.valid() {
		return nil, errors.Newf("lsmstats/backfill: invalid snapshot order %d", o)
	}
	return []byte(o.String()), nil
}

func (o *SnapshotOrder) UnmarshalText(b []byte) (err error) {
	*o, err = ParseSnapshotOrder(string(b))
	return err
}

func (o SnapshotOrder) valid() bool { return o <= Interleaved }

// ActorUpstream is one upstream table of an actor: its id, its MV's and
// its backfill state table's, and the actor's vnodes of it.
type ActorUpstream struct {
	Upstream, MV, State uint32
	Vnodes              *roaring.Bitmap
}

// actorInput is an actor's side of one upstream table: the replicated
// table it reads, and its writers of the table's MV and state.
type actorInput struct {
	table *replicated.Table
	mv    *Materialize
	state *lsm.Writer
}

// vnodeKey indexes a vnode of an upstream in Actor.index.
func vnodeKey(upstream int, vnode uint16) uint32 { return uint32(upstream)<<16 | uint32(vnode) }

// Actor is an arrangement backfill executor for a set of vnodes. Between two
// barriers it applies upstream chunks to its replicated table and buffers
// them. At a barrier it reads the ending epoch's snapshot quota of all its
// unfinished vnodes interleaved (one row of each in turn, as RisingWave's
// select_all over one stream per vnode) at the previous barrier's epoch,
// forwards the buffered upstream ops of finished vnodes and those at or
// below their vnode's cursor (the rest will be read by later snapshots),
// writes its output into the MV, persists each changed vnode state, seals
// its writers and reports.
type Actor struct {
	cfg    ActorConfig
	inputs []actorInput // by upstream index

	vnodes []VnodeState // by upstream, then vnode
	dirty  []bool       // state changed since the last barrier
	saved  [][]byte     // the persisted state row of each vnode, nil if none
	index  map[uint32]int
	buffer []RowOp
	// plan and streams are readPlan's buffers, kept between barriers, and
	// grouped groupPlan's. ahead is each vnode's rows read past those its
	// plans took (by index in vnodes; nil before its first read and once
	// finished), spare those of finished vnodes, for the next to start, and
	// plans counts the plans read, so that a slab is reused only once no
	// plan's op points into it.
	plan    snapPlan
	streams []stream
	ahead   []*aheadRows
	spare   []*aheadRows
	plans   uint64
	grouped struct {
		ops    []RowOp
		idx    []int
		counts []int
	}
	// aheadErr is readAhead's failed write, which the next barrier returns.
	aheadErr error
	snapAt   uint64 // snapshot reads are at this epoch (the previous barrier's)
	curr     uint64 // the epoch being written
	started  bool   // the first barrier arrived
	// stateBytes counts the state rows written (pk + row bytes), and
	// statsOnlyBytes what they would have been without row counts (the
	// stats approach's state).
	stateBytes, statsOnlyBytes int64
}

// NewActor creates an actor and loads its vnodes' state at the committed
// epoch (after a restart or rescale, whatever actor wrote it), over every
// upstream table it reads.
func NewActor(cfg ActorConfig) (_ *Actor, err error) {
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = 256
	}
	if cfg.BarrierRows <= 0 {
		cfg.BarrierRows = 2048
	}
	if !cfg.Order.valid() {
		return nil, errors.Newf("lsmstats/backfill: actor %d: invalid snapshot order %d", cfg.ID, cfg.Order)
	}
	ups := cfg.Upstreams
	if len(ups) == 0 {
		ups = []ActorUpstream{{Upstream: cfg.Upstream, MV: cfg.MV, State: cfg.State, Vnodes: cfg.Vnodes}}
	} else if cfg.Upstream != 0 || cfg.MV != 0 || cfg.State != 0 || cfg.Vnodes != nil {
		return nil, errors.Newf("lsmstats/backfill: actor %d has Upstreams and Upstream, MV, State or Vnodes too", cfg.ID)
	}
	a := &Actor{cfg: cfg, index: map[uint32]int{}}
	defer func() {
		if err != nil {
			_ = a.Close()
		}
	}()
	for u, up := range ups {
		def, err := cfg.Store.Table(up.Upstream)
		if err != nil {
			return nil, err
		}
		if up.Vnodes == nil {
			return nil, errors.Newf("lsmstats/backfill: actor %d: no vnodes of upstream %d", cfg.ID, up.Upstream)
		}
		table, err := replicated.New(cfg.Store, up.Upstream, up.Vnodes)
		if err != nil {
			return nil, err
		}
		// Both writers are unchecked: their ops are consistent by
		// construction, so reading before each write would only cost. A
		// snapshot row is new to the MV (its pk is above the vnode's
		// cursor, and only this actor writes the vnode), a forwarded op
		// carries the row it replaces, and a state row's previous value is
		// the one this actor persisted (saved). The store then flags the
		// MV's and the state table's live statistics as possibly
		// containing estimates; Verify still recounts them.
		trusted := &lsm.WriterOptions{Unchecked: true}
		mvw, err := cfg.Store.NewWriter(up.MV, up.Vnodes, trusted)
		if err != nil {
			return nil, err
		}
		sw, err := cfg.Store.NewWriter(up.State, up.Vnodes, trusted)
		if err != nil {
			_ = mvw.Close()
			return nil, err
		}
		a.inputs = append(a.inputs, actorInput{table: table, mv: &Materialize{w: mvw}, state: sw})
		vs := make([]uint16, 0, up.Vnodes.GetCardinality())
		for it := up.Vnodes.Iterator(); it.HasNext(); {
			vs = append(vs, uint16(it.Next()))
		}
		states, err := LoadStates(cfg.Store, up.State, def, vs)
		if err != nil {
			return nil, err
		}
		for _, st := range states {
			st.Upstream = u
			a.index[vnodeKey(u, st.Vnode)] = len(a.vnodes)
			var saved []byte
			if st.Started() {
				saved = EncodeState(st, cfg.RowCount)
			}
			a.vnodes = append(a.vnodes, st)
			a.saved = append(a.saved, saved)
		}
	}
	a.dirty = make([]bool, len(a.vnodes))
	a.ahead = make([]*aheadRows, len(a.vnodes))
	return a, nil
}

// Finished reports whether every vnode of the actor finished.
func (a *Actor) Finished() bool {
	for _, s := range a.vnodes {
		if !s.Finished {
			return false
		}
	}
	return true
}

// Close releases the actor's writers (uncommitted ops are discarded).
func (a *Actor) Close() error {
	// Abort: work not committed is discarded, as Job.Close says, and not
	// left to a later Commit (a reopened job writes those epochs again).
	var err error
	for _, in := range a.inputs {
		err = errors.CombineErrors(err, errors.CombineErrors(in.mv.w.Abort(), in.state.Abort()))
	}
	return err
}

// Run handles messages until in is closed or ctx is done. Each barrier is
// acknowledged on acks after the actor sealed its writers at barrier.Prev;
// then, if the barrier says ReadAhead, the actor reads the next barrier's
// snapshot rows (readAhead) while the job commits.
func (a *Actor) Run(ctx context.Context, in <-chan Message, acks chan<- Ack) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case m, ok := <-in:
			if !ok {
				return nil
			}
			var err error
			switch m := m.(type) {
			case Chunk:
				err = a.OnChunk(m)
			case Barrier:
				err = a.OnBarrier(ctx, m)
				acks <- Ack{Actor: a.cfg.ID, Epoch: m.Prev, Err: err}
				if err == nil && m.ReadAhead {
					a.readAhead(ctx)
				}
			}
			if err != nil {
				return err
			}
		}
	}
}

// Ack acknowledges a barrier.
type Ack struct {
	Actor int
	Epoch uint64
	Err   error
}

// OnChunk applies an upstream chunk of the current epoch.
func (a *Actor) OnChunk(c Chunk) error {
	if !a.started {
		return errors.New("lsmstats/backfill: chunk before the first barrier")
	}
	for _, op := range c.Ops {
		// The upstream is shuffled by vnode: another vnode's op is a bug
		// upstream, never to be dropped silently.
		i, ok := a.index[vnodeKey(op.Upstream, op.Vnode)]
		if !ok || op.Upstream < 0 {
			return errors.Wrapf(lsm.ErrInvalidVnode, "backfill actor %d got an op of vnode %d of upstream %d it does not own",
				a.cfg.ID, op.Vnode, op.Upstream)
		}
		a.ahead[i].touch(op.PK)
	}
	// A fixed snapshot reads no overlay: a snapshot backfill's actors get
	// chunks only once every vnode finished, and forward them all.
	for u, ops := range byUpstream(c.Ops, len(a.inputs)) {
		if len(ops) > 0 && !a.cfg.Fixed {
			a.inputs[u].table.Apply(a.curr, replicatedOps(ops))
		}
	}
	a.buffer = append(a.buffer, c.Ops...)
	return nil
}

// OnBarrier reads the snapshot quota of the ending epoch, forwards the
// buffered upstream ops by the cursor rule, persists state and seals.
func (a *Actor) OnBarrier(ctx context.Context, b Barrier) error {
	if !a.started {
		// The first barrier only sets the epochs: snapshots read at Prev,
		// the committed epoch, and the report gives a figure right away.
		a.started, a.snapAt, a.curr = true, b.Prev, b.Curr
		if a.Finished() {
			return a.cfg.Reporter.Finish(b.Prev, a.vnodes)
		}
		return a.cfg.Reporter.Update(b.Prev, a.vnodes)
	}
	if b.Prev != a.curr {
		return errors.Newf("lsmstats/backfill: actor %d at epoch %d got barrier %d->%d", a.cfg.ID, a.curr, b.Prev, b.Curr)
	}
	if err := a.readSnapshot(ctx); err != nil {
		return err
	}
	if err := a.forward(); err != nil {
		return err
	}
	if err := a.persist(); err != nil {
		return err
	}
	for _, in := range a.inputs {
		if err := in.mv.w.Seal(a.curr); err != nil {
			return err
		}
		if err := in.state.Seal(a.curr); err != nil {
			return err
		}
	}
	var err error
	if a.Finished() {
		err = a.cfg.Reporter.Finish(a.curr, a.vnodes)
	} else {
		err = a.cfg.Reporter.Update(a.curr, a.vnodes)
	}
	a.snapAt, a.curr = b.Prev, b.Curr
	return err
}

// readSnapshot takes up to BarrierRows rows of the unfinished vnodes at the
// previous barrier's epoch (readPlan, or the plan read ahead after the last
// barrier), writes them into the MV (writePlan, unless read ahead) and
// moves each vnode's cursor to its last row taken, marking the vnodes found
// exhausted finished.
func (a *Actor) readSnapshot(ctx context.Context) error {
	p := &a.plan
	if err := a.aheadErr; err != nil {
		a.aheadErr = nil
		return err
	}
	if p.written && p.at != a.snapAt {
		// Rows written ahead for another epoch's read: a bug, never to be
		// read again and written twice.
		return errors.AssertionFailedf("backfill actor %d: rows written ahead at snapshot epoch %d, barrier reads at %d", a.cfg.ID, p.at, a.snapAt)
	}
	if !p.ready || p.at != a.snapAt {
		if err := a.readPlan(ctx); err != nil {
			return err
		}
	}
	if !p.written {
		if err := a.writePlan(ctx); err != nil {
			return err
		}
	}
	p.ready, p.written = false, false
	for _, i := range p.visited {
		a.dirty[i] = true
	}
	for k, op := range p.ops {
		st := &a.vnodes[p.idx[k]]
		st.Cursor = append(st.Cursor[:0], op.PK...)
		st.RowCount++
	}
	for _, i := range p.finished {
		a.vnodes[i].Finished = true
		if ra := a.ahead[i]; ra != nil {
			a.ahead[i] = nil
			a.spare = append(a.spare, ra)
		}
	}
	return nil
}

// writePlan writes the plan's rows into the MV at the current epoch, in
// chunks of ChunkSize under the rate limiter.
func (a *Actor) writePlan(ctx context.Context) error {
	p := &a.plan
	for rest := p.ops; len(rest) > 0; {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(len(rest), a.cfg.ChunkSize)
		if a.cfg.Limiter != nil {
			if err := a.cfg.Limiter.WaitN(ctx, n); err != nil {
				return err
			}
		}
		if err := a.apply(rest[:n]); err != nil {
			return err
		}
		rest = rest[n:]
	}
	p.written = true
	return nil
}

// snapPlan is what one barrier takes from the snapshot: the rows in the
// order the actor writes them (pk and row in their vnode's aheadRows), the
// index in Actor.vnodes of each row's vnode, the vnodes the read visited
// and those it found exhausted. Reading a plan and writing its rows change no
// vnode state: readSnapshot does that at the barrier. So the actor can
// read and write the next barrier's plan ahead, while the job commits the
// checkpoint it just acknowledged.
type snapPlan struct {
	ready, written bool
	at             uint64 // the epoch read (Actor.snapAt)
	ops            []RowOp
	idx            []int
	visited        []int
	finished       []int
}

// readAhead reads and writes the next barrier's plan, after the actor
// acknowledged a barrier of a job that goes on.
//
// The read is the one the next barrier would make: at the epoch just
// acknowledged (the next barrier's snapshot epoch), which the replicated
// table holds whole, committed or not, and from the cursors just set; the
// upstream chunks that arrive in between belong to a later epoch, which
// the snapshot does not see. The write is the one the next barrier would
// make too: the snapshot rows go into the MV at the current epoch before
// that epoch's forwarded ops, as they do at the barrier (forward runs after
// readSnapshot), and the writer keeps the last op of a pk in an epoch.
//
// A failed read is dropped, and the next barrier reads again. A failed
// write leaves rows in the MV's epoch: the next barrier returns its error.
func (a *Actor) readAhead(ctx context.Context) {
	if a.Finished() {
		return
	}
	if err := a.readPlan(ctx); err != nil {
		a.plan.ready = false
		return
	}
	if err := a.writePlan(ctx); err != nil {
		a.aheadErr = err
	}
}

// readPlan reads the plan of up to BarrierRows rows of the unfinished vnodes
// at a.snapAt: one row of each in turn (Interleaved), or the first vnode's
// to its end, then the next's (VnodeOrder).
//
// One snapshot iterator serves every vnode: it visits the vnodes in turn
// and buffers the rows each will take this barrier (its share of the quota,
// and one more to tell whether the vnode is exhausted); the round robin then
// takes them from the buffers. The rows taken, their order and the vnodes
// found finished are those of one iterator per vnode read in turn.
//
// In the interleaved order a vnode gives a few rows a barrier (16 of 2,048
// over 128 vnodes), and seeking into it costs more than reading them: a
// seek through every level's index to a block per level, cold after the
// other vnodes' reads (15 µs a seek at 1M rows, 0.93 s of a 3.3 s
// backfill). So a vnode's read goes on past its share, and the rows it did
// not take wait in its aheadRows for the next plans, for as long as no
// upstream op falls among them.
func (a *Actor) readPlan(ctx context.Context) error {
	p := &a.plan
	p.ready, p.written, p.at = false, false, a.snapAt
	p.ops, p.idx, p.visited, p.finished = p.ops[:0], p.idx[:0], p.visited[:0], p.finished[:0]
	a.plans++
	// One snapshot and one iterator per upstream table, opened when a
	// vnode of the table first needs them; with a fixed snapshot, one pin
	// of its epoch for every table.
	snaps := make([]*replicated.Snapshot, len(a.inputs))
	its := make([]rowIter, len(a.inputs))
	var fixed *lsm.Snapshot
	defer func() {
		for u := range its {
			if its[u] != nil {
				_ = its[u].Close()
			}
			if snaps[u] != nil {
				snaps[u].Close()
			}
		}
		if fixed != nil {
			fixed.Close()
		}
	}()
	streams := a.streams[:0]
	for i, s := range a.vnodes {
		if !s.Finished {
			streams = append(streams, stream{i: i})
		}
	}
	a.streams = streams
	quota := a.cfg.BarrierRows
	// fill buffers at least n rows of a stream's vnode after its last row:
	// the rows read ahead by an earlier plan if they hold any, else read
	// from the snapshot (more in the interleaved order: aheadRows).
	fill := func(s *stream, n int) error {
		st := &a.vnodes[s.i]
		ra := a.aheadOf(s.i)
		after := s.last
		if after == nil {
			after = st.Cursor
			if rows, ok := ra.after(after); ok {
				ra.take(a.plans)
				s.rows, s.next, s.exhausted = rows, 0, ra.end
				return nil
			}
		} else {
			ra.used = true // the plan took every row buffered
		}
		u := st.Upstream
		var err error
		switch {
		case its[u] != nil:
		case a.cfg.Fixed:
			if fixed == nil {
				if fixed, err = a.cfg.Store.Pin(a.cfg.FixedEpoch); err != nil {
					return errors.Wrapf(err, "backfill actor %d: the snapshot epoch", a.cfg.ID)
				}
			}
		case snaps[u] == nil:
			if snaps[u], err = a.inputs[u].table.Snapshot(a.snapAt); err != nil {
				return err
			}
		}
		if its[u] == nil && a.cfg.Fixed {
			its[u], err = newFixedIter(fixed, a.inputs[u].table.Def().ID, st.Vnode, after)
		} else if its[u] == nil {
			its[u], err = snaps[u].Iter(st.Vnode, after)
		} else {
			err = its[u].Reset(st.Vnode, after)
		}
		if err != nil {
			return err
		}
		it := its[u]
		if a.cfg.Order == Interleaved {
			// n is a round's worth of rows and two more (readPlan's
			// share); read factor rounds' worth.
			n += (ra.grow(s.i) - 1) * max(1, n-2)
		}
		ra.start(after, a.plans)
		for len(ra.rows) < n {
			if len(ra.rows)%a.cfg.ChunkSize == 0 {
				// Once a chunk's worth of rows, as the writes look.
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if !it.Next() {
				if err := it.Err(); err != nil {
					return errors.Wrapf(err, "backfill actor %d: snapshot of vnode %d", a.cfg.ID, st.Vnode)
				}
				ra.end = true
				break
			}
			ra.add(RowOp{Kind: Insert, Upstream: u, Vnode: st.Vnode, PK: it.PK(), Row: it.Row()})
		}
		ra.valid = true
		s.rows, s.next, s.exhausted = ra.rows, 0, ra.end
		return nil
	}
	// take moves the next row of s into the plan, reading up to n rows of
	// its vnode first if none is buffered; false: the vnode has no more
	// rows, and is finished.
	take := func(s *stream, n int) (bool, error) {
		if s.next == len(s.rows) && !s.exhausted {
			if err := fill(s, n); err != nil {
				return false, err
			}
		}
		if !s.visited {
			s.visited = true
			p.visited = append(p.visited, s.i)
		}
		if s.next == len(s.rows) {
			p.finished = append(p.finished, s.i)
			return false, nil
		}
		p.ops = append(p.ops, s.rows[s.next])
		p.idx = append(p.idx, s.i)
		s.last = s.rows[s.next].PK
		s.next++
		quota--
		return true, nil
	}
	if a.cfg.Order == VnodeOrder {
		// The whole quota from the first unfinished vnode, then the next.
		for quota > 0 && len(streams) > 0 {
			more, err := take(&streams[0], quota+1)
			if err != nil {
				return err
			}
			if !more {
				streams = streams[1:]
			}
		}
	} else {
		for quota > 0 && len(streams) > 0 {
			live := streams[:0]
			share := quota/len(streams) + 2 // a round's worth for each, and one to see the end
			for j := range streams {
				s := &streams[j]
				if quota == 0 {
					live = append(live, *s)
					continue
				}
				more, err := take(s, share)
				if err != nil {
					return err
				}
				if more {
					live = append(live, *s)
				}
			}
			streams = live
		}
		a.groupPlan()
	}
	// The ops of the current epoch that arrived before this read belong to
	// a later epoch than it: rows read ahead among them must not serve the
	// later plans, which read at that epoch or after it.
	for _, op := range a.buffer {
		a.ahead[a.index[vnodeKey(op.Upstream, op.Vnode)]].touch(op.PK)
	}
	p.ready = true
	return nil
}

// groupPlan puts the rows of an interleaved plan in the order of a.vnodes
// (by upstream, then vnode), each vnode's in the order taken, its pk
// order: the rows are those the round robin took, and written so, the MV
// writer's buffer of the epoch stays in key order (lsm's piece), which
// spares it an index and a sort. Nothing else reads the plan's order: the
// rows of one epoch are written together, and a vnode's cursor ends at its
// last row either way.
func (a *Actor) groupPlan() {
	p, g := &a.plan, &a.grouped
	g.counts = slices.Grow(g.counts[:0], len(a.vnodes)+1)[:len(a.vnodes)+1]
	clear(g.counts)
	for _, i := range p.idx {
		g.counts[i+1]++
	}
	for i := 1; i < len(g.counts); i++ {
		g.counts[i] += g.counts[i-1]
	}
	ops := slices.Grow(g.ops[:0], len(p.ops))[:len(p.ops)]
	idx := slices.Grow(g.idx[:0], len(p.idx))[:len(p.idx)]
	for j, i := range p.idx {
		k := g.counts[i]
		g.counts[i]++
		ops[k], idx[k] = p.ops[j], i
	}
	g.ops, p.ops = p.ops, ops
	g.idx, p.idx = p.idx, idx
}

// rowIter iterates the live rows of a vnode after a pk: a replicated
// table's (replicated.Iter) or a fixed snapshot's (fixedIter).
type rowIter interface {
	Next() bool
	PK() []byte
	Row() []byte
	Err() error
	Reset(vnode uint16, after []byte) error
	Close() error
}

// fixedIter iterates the live rows of a vnode with pk > after at a pinned
// epoch of the store.
type fixedIter struct {
	it      *lsm.Iter
	after   []byte
	started bool
}

func newFixedIter(snap *lsm.Snapshot, table uint32, vnode uint16, after []byte) (*fixedIter, error) {
	it, err := snap.NewIter(table, vnode, after, nil)
	if err != nil {
		return nil, err
	}
	return &fixedIter{it: it, after: after}, nil
}

func (f *fixedIter) Next() bool {
	ok := false
	if !f.started {
		f.started, ok = true, f.it.First()
	} else {
		ok = f.it.Next()
	}
	if ok && f.after != nil && bytes.Equal(f.it.PK(), f.after) {
		ok = f.it.Next()
	}
	return ok
}

func (f *fixedIter) PK() []byte   { return f.it.PK() }
func (f *fixedIter) Row() []byte  { return f.it.Row() }
func (f *fixedIter) Err() error   { return f.it.Error() }
func (f *fixedIter) Close() error { return f.it.Close() }
func (f *fixedIter) Reset(vnode uint16, after []byte) error {
	f.after, f.started = after, false
	return f.it.Reset(vnode, after, nil)
}

// stream is one unfinished vnode of a readPlan: the rows buffered for it
// (rows[next:] not taken yet; in its aheadRows), the pk of the last row
// taken, and whether the vnode has no rows after the buffered ones.
type stream struct {
	i         int
	rows      []RowOp
	next      int
	last      []byte
	exhausted bool
	visited   bool
}

// aheadRows is a vnode's rows read at a snapshot, in pk order: every live
// row with pk above from (or from the vnode's first, if fromStart) up to the
// last one read, or to the vnode's end. A later plan at a later epoch takes
// the rows above its cursor from them instead of seeking into the vnode,
// for as long as they are valid: the rows of that later snapshot in the
// same range. The actor sees every upstream op of its vnodes (OnChunk, and
// the ops of the epoch in progress when the rows were read: readPlan), and
// an op whose pk falls in the range cuts the range, and the rows, below its
// pk (touch); an op above the range changes nothing the rows say, and one
// below it is below the cursor, forwarded.
//
// The read takes as many rounds' worth of rows as its factor, which
// doubles each time the rows served their plans to the last one and halves
// each time an op cut rows off, between 1 and maxAhead: under churn a vnode
// reads about what it takes, without churn one seek serves maxAhead
// barriers. So an actor holds at most maxAhead barriers' rows and two per
// vnode, in two slabs per vnode.
type aheadRows struct {
	from      []byte
	fromStart bool
	rows      []RowOp
	end       bool
	valid     bool
	// used says that plans took the last row, cut that an op cut rows
	// off; factor is the read's factor (0 until the first read).
	used, cut bool
	factor    int
	// slabs hold the rows' pks and values, the last read's in slabs[cur]
	// from base on. A slab is reused only by a later plan than the last
	// that took rows from it, once that plan's ops were written; so a
	// plan that takes a vnode's rows read ahead and then reads the vnode
	// on reads into the other slab, and the two take turns.
	slabs [2]slab
	cur   int
	base  int
}

// slab is bytes of rows read ahead and the last plan that took rows from
// them.
type slab struct {
	b    []byte
	plan uint64
}

// aheadOf returns the rows read ahead of vnode i, with a finished vnode's
// buffers if there is one: in the vnode order one vnode after another
// reads its whole range, and each would grow its own.
func (a *Actor) aheadOf(i int) *aheadRows {
	r := a.ahead[i]
	if r != nil {
		return r
	}
	if n := len(a.spare); n > 0 {
		r, a.spare = a.spare[n-1], a.spare[:n-1]
		// The slabs keep their plans: a slab a plan took rows from is
		// not reused by that plan.
		*r = aheadRows{from: r.from[:0], rows: r.rows[:0], slabs: r.slabs, cur: r.cur}
	} else {
		r = &aheadRows{}
	}
	a.ahead[i] = r
	return r
}

// maxAhead is the largest factor of a vnode's read: the rounds' worth of
// rows it reads.
const maxAhead = 8

// after returns the rows above pk (nil: all), if the rows are valid and
// hold all the vnode's rows above pk up to their last or the vnode's end,
// and at least one row or the end.
func (r *aheadRows) after(pk []byte) ([]RowOp, bool) {
	if !r.valid || !r.fromStart && (pk == nil || bytes.Compare(r.from, pk) > 0) {
		return nil, false
	}
	j := 0
	if pk != nil {
		j, _ = slices.BinarySearchFunc(r.rows, pk, func(op RowOp, pk []byte) int {
			if bytes.Compare(op.PK, pk) <= 0 {
				return -1
			}
			return 1
		})
	}
	if j == len(r.rows) && !r.end {
		r.used = true // earlier plans took them all
		return nil, false
	}
	return r.rows[j:], true
}

// touch keeps the rows valid for an upstream op on pk: if pk falls in
// their range, the rows below it are still all the vnode's rows from the
// read's start up to the last of them, and the rest are dropped.
func (r *aheadRows) touch(pk []byte) {
	if r == nil || !r.valid || !r.fromStart && bytes.Compare(pk, r.from) <= 0 {
		return
	}
	n := len(r.rows)
	if !r.end && (n == 0 || bytes.Compare(pk, r.rows[n-1].PK) > 0) {
		return // above the range
	}
	j, _ := slices.BinarySearchFunc(r.rows, pk, func(op RowOp, pk []byte) int { return bytes.Compare(op.PK, pk) })
	r.rows, r.end = r.rows[:j], false
	r.valid = j > 0
	r.cut = r.cut || j < n
}

// grow returns the factor of the next read: halved if an op cut the last
// read's rows, doubled if plans took them all. A vnode's first read has a
// factor of 1 to maxAhead by its place i among the actor's vnodes, so that
// the vnodes do not run out of rows at the same barrier and read ahead
// together, every maxAhead barriers, but about a maxAhead-th of them at
// each.
func (r *aheadRows) grow(i int) int {
	switch {
	case r.factor == 0:
		r.factor = 1 + i%maxAhead
	case r.cut:
		r.factor = max(1, r.factor/2)
	case r.used:
		r.factor = min(maxAhead, 2*r.factor)
	}
	r.used, r.cut = false, false
	return r.factor
}

// start empties the rows for a read of the rows above pk (nil: from the
// vnode's first) by plan.
func (r *aheadRows) start(pk []byte, plan uint64) {
	r.valid, r.end, r.rows = false, false, r.rows[:0]
	r.fromStart, r.from = pk == nil, append(r.from[:0], pk...)
	if r.slabs[r.cur].plan == plan {
		r.cur ^= 1
	}
	sl := &r.slabs[r.cur]
	if sl.plan != plan {
		sl.b = sl.b[:0]
	}
	sl.plan, r.base = plan, len(sl.b)
}

// take marks the rows as taken by plan.
func (r *aheadRows) take(plan uint64) { r.slabs[r.cur].plan = plan }

// add appends a row read, copying its pk and value into the current slab.
// A full slab is replaced by one a quarter larger than this read's bytes
// so far (the reads of a vnode are about the same size, so a slab grows a
// few times and then serves them all), and the rows in the old one stay
// valid.
func (r *aheadRows) add(op RowOp) {
	sl := &r.slabs[r.cur]
	if n := len(op.PK) + len(op.Row); len(sl.b)+n > cap(sl.b) {
		read := len(sl.b) - r.base
		sl.b = make([]byte, 0, max((read+n)*5/4, 512))
		r.base = 0
	}
	k := len(sl.b)
	sl.b = append(sl.b, op.PK...)
	sl.b = append(sl.b, op.Row...)
	op.PK = sl.b[k : k+len(op.PK) : k+len(op.PK)]
	op.Row = sl.b[k+len(op.PK) : len(sl.b) : len(sl.b)]
	r.rows = append(r.rows, op)
}

// forward writes the buffered upstream ops that the snapshot will not read:
// those of finished vnodes and those at or below their vnode's cursor.
func (a *Actor) forward() error {
	out := a.buffer[:0]
	for _, op := range a.buffer {
		st := a.vnodes[a.index[vnodeKey(op.Upstream, op.Vnode)]]
		if st.Finished || st.Cursor != nil && bytes.Compare(op.PK, st.Cursor) <= 0 {
			out = append(out, op)
		}
	}
	err := a.apply(out)
	a.buffer = nil
	return err
}

// apply writes ops into the MVs of their upstream tables, each table's in
// their order.
func (a *Actor) apply(ops []RowOp) error {
	if len(a.inputs) == 1 {
		return a.inputs[0].mv.Apply(a.curr, ops)
	}
	for u, ops := range byUpstream(ops, len(a.inputs)) {
		if err := a.inputs[u].mv.Apply(a.curr, ops); err != nil {
			return err
		}
	}
	return nil
}

// byUpstream splits ops by upstream table, each table's in their order:
// ops of one table alone come back as they are. Every op's Upstream is
// below n.
func byUpstream(ops []RowOp, n int) [][]RowOp {
	out := make([][]RowOp, n)
	one := true
	for _, op := range ops {
		if op.Upstream != ops[0].Upstream {
			one = false
			break
		}
	}
	if one {
		if len(ops) > 0 {
			out[ops[0].Upstream] = ops
		}
		return out
	}
	for _, op := range ops {
		out[op.Upstream] = append(out[op.Upstream], op)
	}
	return out
}

// persist writes the changed vnode states at the current epoch.
func (a *Actor) persist() error {
	for i, s := range a.vnodes {
		if !a.dirty[i] {
			continue
		}
		a.dirty[i] = false
		row := EncodeState(s, a.cfg.RowCount)
		var err error
		w := a.inputs[s.Upstream].state
		if a.saved[i] != nil {
			err = w.Update(a.curr, s.Vnode, statePK(s.Vnode), a.saved[i], row)
		} else {
			err = w.Insert(a.curr, s.Vnode, statePK(s.Vnode), row)
		}
		if err != nil {
			return err
		}
		a.saved[i] = row
		a.stateBytes += int64(8 + len(row))
		statsOnly := len(row) // the same row without its row count
		if a.cfg.RowCount {
			statsOnly -= uvarintLen(s.RowCount)
		}
		a.statsOnlyBytes += int64(8 + statsOnly)
	}
	return nil
}

// Materialize writes a stream of row ops into an MV table: inserts, deletes,
// and update pairs as updates.
type Materialize struct {
	w *lsm.Writer
}

// Apply writes ops at epoch. An UpdateDelete must be followed by the
// UpdateInsert of the same pk; any other op sequence is an error.
func (m *Materialize) Apply(epoch uint64, ops []RowOp) error {
	for i := 0; i < len(ops); i++ {
		op := ops[i]
		var err error
		switch op.Kind {
		case Insert:
			err = m.w.Insert(epoch, op.Vnode, op.PK, op.Row)
		case Delete:
			err = m.w.Delete(epoch, op.Vnode, op.PK, op.Row)
		case UpdateDelete:
			if i+1 == len(ops) || ops[i+1].Kind != UpdateInsert || !bytes.Equal(ops[i+1].PK, op.PK) {
				return errors.Newf("lsmstats/backfill: UpdateDelete of pk %x without its UpdateInsert", op.PK)
			}
			err = m.w.Update(epoch, op.Vnode, op.PK, op.Row, ops[i+1].Row)
			i++
		case UpdateInsert:
			return errors.Newf("lsmstats/backfill: UpdateInsert of pk %x without its UpdateDelete", op.PK)
		default:
			return errors.Newf("lsmstats/backfill: unknown op kind %d of pk %x", op.Kind, op.PK)
		}
		if err != nil {
			return errors.Wrapf(err, "materialize %s", op.Kind)
		}
	}
	return nil
}
