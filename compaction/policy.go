package compaction

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
	"golang.org/x/time/rate"
)

// Defaults of Config and Thresholds (see doc.go for why).
const (
	DefaultVersionRatio      = 1.1
	DefaultDeleteShare       = 0.2
	DefaultTombstoneShare    = 0.3
	DefaultMinGarbage        = 1024
	DefaultInterval          = 30 * time.Second
	DefaultMaxRangesPerRound = 4
	DefaultMaxVnodesPerRange = 32
	DefaultRate              = 200_000
)

// Thresholds decide which vnodes need work. Zero fields take the defaults.
type Thresholds struct {
	// VersionRatio triggers GC when entries − Pebble tombstones exceed
	// VersionRatio × live rows (TiKV's gc.ratio-threshold). At least 1.
	VersionRatio float64
	// DeleteShare triggers GC when MVCC deletes not yet collected are at
	// least this share of the entries. In (0, 1].
	DeleteShare float64
	// TombstoneShare triggers a compaction when Pebble tombstones are at
	// least this share of entries + tombstones. In (0, 1].
	TombstoneShare float64
	// MinGarbage is the floor of every trigger, in entries.
	MinGarbage uint64
}

func (th Thresholds) withDefaults() (Thresholds, error) {
	if th.VersionRatio == 0 {
		th.VersionRatio = DefaultVersionRatio
	}
	if th.DeleteShare == 0 {
		th.DeleteShare = DefaultDeleteShare
	}
	if th.TombstoneShare == 0 {
		th.TombstoneShare = DefaultTombstoneShare
	}
	if th.MinGarbage == 0 {
		th.MinGarbage = DefaultMinGarbage
	}
	switch {
	case th.VersionRatio < 1 || math.IsNaN(th.VersionRatio) || math.IsInf(th.VersionRatio, 0):
		return th, errors.Newf("lsmstats/compaction: version ratio %v must be at least 1", th.VersionRatio)
	case !(th.DeleteShare > 0 && th.DeleteShare <= 1):
		return th, errors.Newf("lsmstats/compaction: delete share %v must be in (0, 1]", th.DeleteShare)
	case !(th.TombstoneShare > 0 && th.TombstoneShare <= 1):
		return th, errors.Newf("lsmstats/compaction: tombstone share %v must be in (0, 1]", th.TombstoneShare)
	}
	return th, nil
}

// Config configures a Policy. Zero fields take the defaults.
type Config struct {
	// Store is the store to maintain; required.
	Store *lsm.Store
	Thresholds
	// Interval is the time between the start of two rounds.
	Interval time.Duration
	// MaxRangesPerRound bounds the ranges a round processes, and
	// MaxVnodesPerRange the vnodes of one range.
	MaxRangesPerRound int
	MaxVnodesPerRange int
	// Rate is the pace of GC in versions examined per second, with a burst
	// of Burst (0: Rate/10, at least 1); negative means unlimited.
	Rate  float64
	Burst int
	// BatchSize is GCRequest.BatchSize (0: the store's default).
	BatchSize int
	// Tables limits the policy to these tables; nil means every table.
	Tables []uint32
	// Logf receives a line per error of the background loop; nil drops
	// them (Counters counts them as Errors).
	Logf func(format string, args ...any)
}

// Reason says which triggers fired for a candidate (a bit set).
type Reason uint8

const (
	// ReasonVersions: entries − tombstones > VersionRatio × live rows.
	ReasonVersions Reason = 1 << iota
	// ReasonDeletes: uncollected MVCC deletes ≥ DeleteShare × entries.
	ReasonDeletes
	// ReasonTombstones: Pebble tombstones ≥ TombstoneShare × (entries +
	// tombstones).
	ReasonTombstones
)

func (r Reason) String() string {
	var parts []string
	for _, x := range []struct {
		bit  Reason
		name string
	}{{ReasonVersions, "versions"}, {ReasonDeletes, "deletes"}, {ReasonTombstones, "tombstones"}} {
		if r&x.bit != 0 {
			parts = append(parts, x.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// needsGC reports whether a GC trigger fired.
func (r Reason) needsGC() bool { return r&(ReasonVersions|ReasonDeletes) != 0 }

// Candidate is a vnode range a round would process.
type Candidate struct {
	Table            uint32
	VnodeLo, VnodeHi int // [VnodeLo, VnodeHi)
	Reason           Reason
	// Garbage is the entries a GC and compaction of the range would
	// reclaim at most: versions beyond the live rows plus Pebble tombstones.
	Garbage uint64
}

func (c Candidate) String() string {
	return fmt.Sprintf("table %d vnodes [%d, %d): %s, %d reclaimable", c.Table, c.VnodeLo, c.VnodeHi, c.Reason, c.Garbage)
}

// Round reports one round.
type Round struct {
	SafeEpoch  uint64
	Candidates []Candidate
	// GC has one result per range GC ran on (resumed pieces summed).
	GC []lsm.GCResult
	// Compactions counts the ranges compacted.
	Compactions int
	Duration    time.Duration
}

// Counters are a Policy's cumulative counters. Errors counts the rounds
// that failed (not those that Stop or the caller's context cancelled).
type Counters struct {
	Rounds, Ranges, GCPasses, VersionsDeleted, Compactions, Errors int64
	// RoundTime is the total time spent in rounds.
	RoundTime time.Duration
}

// Policy is the background GC and compaction loop of one store. Create it
// with New. Safe for concurrent use; rounds are serialised.
type Policy struct {
	cfg     Config
	th      Thresholds
	limiter *rate.Limiter
	tables  map[uint32]bool

	roundMu sync.Mutex
	// memo remembers, per vnode, the state after a round could do nothing
	// more: skip it until the safe epoch moves or it grows.
	memo map[vnodeKey]memo

	lifeMu  sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool

	rounds, ranges, passes, deleted, compactions, errs, roundNanos atomic.Int64
}

type vnodeKey struct {
	table uint32
	vnode uint16
}

type memo struct {
	safe    uint64
	entries uint64
}

// New returns a Policy for cfg.Store; it does nothing until Start or
// RunRound.
func New(cfg Config) (*Policy, error) {
	if cfg.Store == nil {
		return nil, errors.New("lsmstats/compaction: Config.Store is nil")
	}
	th, err := cfg.Thresholds.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxRangesPerRound == 0 {
		cfg.MaxRangesPerRound = DefaultMaxRangesPerRound
	}
	if cfg.MaxVnodesPerRange == 0 {
		cfg.MaxVnodesPerRange = DefaultMaxVnodesPerRange
	}
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	switch {
	case cfg.Interval < 0, cfg.MaxRangesPerRound < 0, cfg.MaxVnodesPerRange < 0, cfg.Burst < 0, cfg.BatchSize < 0, math.IsNaN(cfg.Rate):
		return nil, errors.Newf("lsmstats/compaction: negative bound in %+v", cfg)
	}
	p := &Policy{cfg: cfg, th: th, memo: map[vnodeKey]memo{}}
	if cfg.Rate > 0 {
		burst := cfg.Burst
		if burst == 0 {
			burst = max(1, int(cfg.Rate/10))
		}
		p.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), burst)
	}
	if cfg.Tables != nil {
		p.tables = map[uint32]bool{}
		for _, t := range cfg.Tables {
			p.tables[t] = true
		}
	}
	return p, nil
}

// Start launches the background loop: a round every Interval. It returns
// an error if the Policy was started before or stopped.
func (p *Policy) Start() error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.stopped || p.done != nil {
		return errors.New("lsmstats/compaction: policy already started or stopped")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go p.loop(ctx, p.done)
	return nil
}

// Stop cancels the round in progress, waits for the loop to end and
// returns. It is idempotent; a stopped Policy cannot be restarted.
func (p *Policy) Stop() {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	p.stopped = true
	if p.cancel != nil {
		p.cancel()
		<-p.done
		p.cancel = nil
	}
}

func (p *Policy) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := p.RunRound(ctx); err != nil {
			if errors.Is(err, lsm.ErrClosed) {
				return
			}
			if ctx.Err() == nil && p.cfg.Logf != nil {
				p.cfg.Logf("lsmstats/compaction: round: %v", err)
			}
			if errors.Is(err, lsm.ErrFailed) {
				// The store refuses writes until it is reopened (as a new
				// Store, with a new Policy): every later round would fail.
				if p.cfg.Logf != nil {
					p.cfg.Logf("lsmstats/compaction: the store failed; the policy stops")
				}
				return
			}
		}
	}
}

// Counters returns the cumulative counters.
func (p *Policy) Counters() Counters {
	return Counters{
		Rounds: p.rounds.Load(), Ranges: p.ranges.Load(), GCPasses: p.passes.Load(),
		VersionsDeleted: p.deleted.Load(), Compactions: p.compactions.Load(), Errors: p.errs.Load(),
		RoundTime: time.Duration(p.roundNanos.Load()),
	}
}

// Plan returns the candidates a round would process now, best first.
func (p *Policy) Plan() []Candidate {
	p.roundMu.Lock()
	defer p.roundMu.Unlock()
	return p.plan(p.cfg.Store.Stats(), p.cfg.Store.SafeEpoch())
}

// RunRound runs one round synchronously: plan; GC each candidate range
// that a GC trigger picked; compact the ranges left with at least
// MinGarbage Pebble tombstones, one manual compaction for ranges of a table
// that share an SST (Pebble rewrites whole SSTs, so compacting them apart
// would rewrite the shared SSTs once per range); remember what could not be
// helped. It stops at the first error (the next round retries).
func (p *Policy) RunRound(ctx context.Context) (Round, error) {
	p.roundMu.Lock()
	defer p.roundMu.Unlock()
	start := time.Now()
	defer func() {
		p.rounds.Add(1)
		p.roundNanos.Add(int64(time.Since(start)))
	}()
	s := p.cfg.Store
	rd := Round{SafeEpoch: s.SafeEpoch()}
	rd.Candidates = p.plan(s.Stats(), rd.SafeEpoch)
	fail := func(c Candidate, err error) (Round, error) {
		if ctx.Err() == nil { // a round that Stop cancels did not fail
			p.errs.Add(1)
		}
		rd.Duration = time.Since(start)
		return rd, errors.Wrapf(err, "lsmstats/compaction: %s", c)
	}
	for _, c := range rd.Candidates {
		p.ranges.Add(1)
		if c.Reason.needsGC() {
			if err := p.gc(ctx, c, &rd); err != nil {
				return fail(c, err)
			}
		}
	}
	st := s.Stats()
	var todo []Candidate
	for _, c := range rd.Candidates {
		var tombs uint64
		for v := c.VnodeLo; v < c.VnodeHi; v++ {
			tombs += st.Physical.Vnode(c.Table, uint16(v)).PebbleTombstones
		}
		if tombs >= p.th.MinGarbage {
			todo = append(todo, c)
		}
	}
	for _, c := range mergeSharingSSTs(todo, ssttracker.Files(statsinternal.VersionOf(st.Physical))) {
		if err := s.CompactRange(ctx, c.Table, c.VnodeLo, c.VnodeHi); err != nil {
			return fail(c, err)
		}
		p.compactions.Add(1)
		rd.Compactions++
	}
	// Whatever still triggers now cannot be helped until the safe epoch
	// moves or the vnode grows.
	st, safe := s.Stats(), s.SafeEpoch()
	for _, c := range rd.Candidates {
		for v := c.VnodeLo; v < c.VnodeHi; v++ {
			k := vnodeKey{c.Table, uint16(v)}
			phys := st.Physical.Vnode(c.Table, uint16(v))
			if p.evaluate(phys, st.Live.Vnode(c.Table, uint16(v)).Rows) != 0 {
				p.memo[k] = memo{safe: safe, entries: phys.Entries}
			} else {
				delete(p.memo, k)
			}
		}
	}
	rd.Duration = time.Since(start)
	return rd, nil
}

// gc runs GC passes over one candidate range until it is done.
func (p *Policy) gc(ctx context.Context, c Candidate, rd *Round) error {
	req := lsm.GCRequest{Table: c.Table, VnodeLo: c.VnodeLo, VnodeHi: c.VnodeHi, Limiter: p.limiter, BatchSize: p.cfg.BatchSize}
	var sum lsm.GCResult
	defer func() { rd.GC = append(rd.GC, sum) }()
	for {
		res, err := p.cfg.Store.GC(ctx, req)
		p.passes.Add(1)
		p.deleted.Add(res.Deleted)
		sum.SafeEpoch = res.SafeEpoch
		sum.Examined += res.Examined
		sum.Prefixes += res.Prefixes
		sum.Deleted += res.Deleted
		sum.DeletedBytes += res.DeletedBytes
		sum.Ingestions += res.Ingestions
		sum.Resume = res.Resume
		if err != nil || res.Resume == nil {
			return err
		}
		req.Start = res.Resume
	}
}

// mergeSharingSSTs sorts ranges by (table, vnode) and merges consecutive
// ranges of a table that overlap a common live SST into one range
// spanning both (and the vnodes between them, which share that SST too).
func mergeSharingSSTs(ranges []Candidate, files []ssttracker.FileInfo) []Candidate {
	slices.SortFunc(ranges, func(a, b Candidate) int {
		if a.Table != b.Table {
			return cmp.Compare(a.Table, b.Table)
		}
		return cmp.Compare(a.VnodeLo, b.VnodeLo)
	})
	span := func(c Candidate) (lo, hi []byte) {
		lo = keys.AppendVnodeBound(nil, c.Table, uint16(c.VnodeLo))
		_, hi = keys.VnodeSpan(c.Table, uint16(c.VnodeHi-1))
		return lo, hi
	}
	overlaps := func(f *ssttracker.FileInfo, lo, hi []byte) bool {
		if bytes.Compare(f.Smallest, hi) >= 0 {
			return false
		}
		c := bytes.Compare(f.Largest, lo)
		return c > 0 || (c == 0 && !f.LargestExclusive)
	}
	shareSST := func(a, b Candidate) bool {
		alo, ahi := span(a)
		blo, bhi := span(b)
		for i := range files {
			if overlaps(&files[i], alo, ahi) && overlaps(&files[i], blo, bhi) {
				return true
			}
		}
		return false
	}
	var out []Candidate
	for _, c := range ranges {
		if n := len(out); n > 0 && out[n-1].Table == c.Table && shareSST(out[n-1], c) {
			prev := &out[n-1]
			prev.VnodeHi = max(prev.VnodeHi, c.VnodeHi)
			prev.Reason |= c.Reason
			prev.Garbage += c.Garbage
			continue
		}
		out = append(out, c)
	}
	return out
}

func sat(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// evaluate returns the triggers that fire for counts with live rows, and
// is also what the table prefilter applies to table totals.
func (p *Policy) evaluate(c stats.Counts, live int64) Reason {
	th := &p.th
	rows := uint64(max(live, 0))
	pending := sat(c.Entries, c.PebbleTombstones)
	var r Reason
	if garbage := sat(pending, rows); garbage >= th.MinGarbage && float64(pending) > th.VersionRatio*float64(rows) {
		r |= ReasonVersions
	}
	// Tombstones remove deletes first, at best: what is left is a lower
	// bound of the deletes still to collect.
	if deletes := sat(c.Deletes, c.PebbleTombstones); deletes >= th.MinGarbage && float64(deletes) >= th.DeleteShare*float64(c.Entries) {
		r |= ReasonDeletes
	}
	if c.PebbleTombstones >= th.MinGarbage && float64(c.PebbleTombstones) >= th.TombstoneShare*float64(c.Entries+c.PebbleTombstones) {
		r |= ReasonTombstones
	}
	return r
}

type vnodeCand struct {
	vnode   uint16
	reason  Reason
	garbage uint64
}

// plan picks the candidate ranges from one statistics snapshot.
func (p *Policy) plan(st stats.Snapshot, safe uint64) []Candidate {
	var out []Candidate
	var cands []vnodeCand
	for _, table := range st.Physical.Tables() {
		if p.tables != nil && !p.tables[table] {
			continue
		}
		tot := st.Physical.Table(table).Counts
		live := uint64(max(st.Live.Table(table).Rows, 0))
		// Each floor is on a sum of per-vnode quantities that are never
		// negative (pending ≥ live rows per vnode), so a table below all
		// of them has no vnode above one.
		if sat(sat(tot.Entries, tot.PebbleTombstones), live) < p.th.MinGarbage &&
			sat(tot.Deletes, tot.PebbleTombstones) < p.th.MinGarbage && tot.PebbleTombstones < p.th.MinGarbage {
			continue
		}
		cands = cands[:0]
		for _, v := range st.Physical.Vnodes(table) {
			c := st.Physical.Vnode(table, v)
			rows := st.Live.Vnode(table, v).Rows
			r := p.evaluate(c, rows)
			if r == 0 {
				continue
			}
			if m, ok := p.memo[vnodeKey{table, v}]; ok && m.safe == safe && c.Entries < m.entries+p.th.MinGarbage {
				continue // nothing changed since a round could not help
			}
			garbage := sat(sat(c.Entries, c.PebbleTombstones), uint64(max(rows, 0))) + c.PebbleTombstones
			cands = append(cands, vnodeCand{vnode: v, reason: r, garbage: garbage})
		}
		// Adjacent vnodes form one range, up to MaxVnodesPerRange.
		for i := 0; i < len(cands); {
			cd := Candidate{Table: table, VnodeLo: int(cands[i].vnode)}
			j := i
			for j < len(cands) && (j == i || int(cands[j].vnode) == int(cands[j-1].vnode)+1) && j-i < p.cfg.MaxVnodesPerRange {
				cd.Reason |= cands[j].reason
				cd.Garbage += cands[j].garbage
				j++
			}
			cd.VnodeHi = int(cands[j-1].vnode) + 1
			out = append(out, cd)
			i = j
		}
	}
	slices.SortStableFunc(out, func(a, b Candidate) int {
		switch {
		case a.Garbage > b.Garbage:
			return -1
		case a.Garbage < b.Garbage:
			return 1
		}
		return 0
	})
	if len(out) > p.cfg.MaxRangesPerRound {
		out = out[:p.cfg.MaxRangesPerRound]
	}
	return out
}
