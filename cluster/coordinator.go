package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Launcher starts a node's process (again, after a kill) and returns the
// address it serves on; Kill ends it at once (SIGKILL). Process is the
// launcher of a node in a child process; a test may launch nodes in its
// own process.
type Launcher interface {
	Start(ctx context.Context) (addr string, err error)
	Kill() error
	// Stop waits for the process to exit after a Stop call (or kills it
	// after a grace period).
	Stop() error
}

// CoordinatorConfig configures a coordinator.
type CoordinatorConfig struct {
	Job JobSpec
	// Nodes are the cluster's nodes, by name; the vnodes are split
	// evenly among them at the start.
	Nodes map[string]Launcher
	// HeartbeatEvery is the period of the heartbeats (0: 200ms), and
	// HeartbeatTimeout how long a node may not answer before it is
	// declared lost (0: 2s). BarrierTimeout bounds a step on a node
	// (0: 2 minutes): a slow node holds the checkpoint that long.
	HeartbeatEvery, HeartbeatTimeout, BarrierTimeout time.Duration
	// Truth asks every checkpoint's truth of the nodes (a scan of their
	// vnodes at the committed epoch).
	Truth bool
	// OnCheckpoint gets each cluster checkpoint, in order.
	OnCheckpoint func(Checkpoint)
	// OnStep is called after every cluster step, before the next: the
	// place to move vnodes or kill a node (at a checkpoint only, for
	// moves).
	OnStep func(ctx context.Context, c *Coordinator, step uint64, checkpoint bool) error
	Log    *slog.Logger
	// ReassignLost hands the vnodes of a node that stopped answering to
	// the other nodes: it is started again on its directory to recover its
	// last checkpoint, catches up, and is retired at the next checkpoint
	// (Retire). Without it, the node stays in the cluster with its vnodes.
	ReassignLost bool
	// CompactMoves compacts each range a retirement moves into the object
	// store first (MoveOptions.Compact).
	CompactMoves bool
	// DialOptions are added to the coordinator's connections to the nodes
	// (a test's interceptor that loses answers, say).
	DialOptions []grpc.DialOption
}

// Checkpoint is a cluster checkpoint: every node committed step Step.
type Checkpoint struct {
	Step uint64 `json:"step"`
	// Figures are the job's figures per approach: Σ consumed / Σ total
	// over every node's vnodes, and the displayed (monotone) percentage.
	Figures map[string]ClusterFigure `json:"figures"`
	// Truth is the truth in percent (-1 without it).
	Truth    float64            `json:"truth"`
	Finished bool               `json:"finished"`
	Nodes    map[string]*Report `json:"nodes"`
	// ProgressNS is the coordinator's time to compute the figures.
	ProgressNS int64 `json:"progress_ns"`
	// ETA is the forecast of the time left, from the summed stats figure
	// (backfill.ETA, each node a part of the job).
	ETA  backfill.ETAForecast `json:"eta"`
	Time time.Time            `json:"time"`
}

// ClusterFigure is one approach's figure over the cluster.
type ClusterFigure struct {
	Consumed float64 `json:"consumed"`
	Total    float64 `json:"total"`
	Raw      float64 `json:"raw"`
	// Shown is the displayed percentage: the high-water mark, below 100
	// until the job finished.
	Shown float64 `json:"shown"`
	// Lower and Upper bound the truth (the stats approach's), in percent.
	Lower float64 `json:"lower,omitempty"`
	Upper float64 `json:"upper,omitempty"`
}

// member is a node as the coordinator knows it.
type member struct {
	name   string
	launch Launcher
	addr   string
	cc     *grpc.ClientConn
	c      client
	vnodes []Range
	at     uint64 // the last step it ran
	lost   bool
	last   *Report // its report of step at
	// retiring marks a node whose vnodes go to the others at the next
	// checkpoint, after which it stops (Retire).
	retiring bool
	// drops are ranges moved away that the node has not dropped yet (it
	// failed between a move's import and its drop).
	drops []Range
}

// Coordinator is the meta role: it owns the assignment of vnodes to
// nodes, injects the barriers (every node runs the same steps; a node
// behind catches up alone), declares a checkpoint when every node
// committed its step, sums the job's figures, watches the nodes'
// heartbeats, and moves vnode ranges between nodes. Its methods are for
// one goroutine (Run's, and OnStep's calls from it).
type Coordinator struct {
	cfg CoordinatorConfig
	// membersMu guards the members' fields the heartbeats and the
	// collector read (clients, lost flags, vnodes) and the members list
	// against the coordinator's changes.
	membersMu sync.Mutex
	log       *slog.Logger
	members   []*member
	step      uint64
	hwm       map[string]float64
	moves     []MoveResult
	losses    []Loss
	hbStop    chan struct{}
	hbWG      sync.WaitGroup
	lostCh    chan string
	lastCkp   *Checkpoint
	retries   int
	// eta forecasts the job's end from the summed figures; run counts the
	// openings of nodes' jobs, each a new run for it (the nodes' counts of
	// snapshot rows start over).
	eta *backfill.ETA
	run uint64
	pub published
	// retired are the nodes that left (Retire).
	retired []string
	// afterImport, in tests, runs between a move's import and its drop.
	afterImport func(from, to string)
}

// MoveResult reports a move of a vnode range between two nodes.
type MoveResult struct {
	Step    uint64 `json:"step"`
	From    string `json:"from"`
	To      string `json:"to"`
	Range   Range  `json:"range"`
	Compact bool   `json:"compacted_first"`
	// DropDeferred says that the source failed before it dropped the
	// range: it dropped it once recovered, before its job reopened.
	DropDeferred bool          `json:"drop_deferred,omitempty"`
	Stats        MoveStatsJSON `json:"stats"`
	Duration     time.Duration `json:"duration_ns"`
}

// MoveStatsJSON is lsm.MoveStats as the report writes it.
type MoveStatsJSON struct {
	SharedSSTs     int   `json:"shared_ssts"`
	SharedBytes    int64 `json:"shared_bytes"`
	CopiedVersions int64 `json:"copied_versions"`
	CopiedBytes    int64 `json:"copied_bytes"`
	LiveRows       int64 `json:"live_rows"`
}

// Loss reports a lost node and its recovery.
type Loss struct {
	Node     string        `json:"node"`
	Step     uint64        `json:"step"`
	Reason   string        `json:"reason"`
	Resumed  uint64        `json:"resumed_from_step"`
	Recovery time.Duration `json:"recovery_ns"`
	// Reassigned says that its vnodes went to the other nodes at the next
	// checkpoint (CoordinatorConfig.ReassignLost).
	Reassigned bool `json:"reassigned"`
}

// NewCoordinator starts every node and connects to it.
func NewCoordinator(ctx context.Context, cfg CoordinatorConfig) (*Coordinator, error) {
	if len(cfg.Nodes) == 0 {
		return nil, errors.New("cluster: a coordinator needs at least one node")
	}
	if cfg.HeartbeatEvery <= 0 {
		cfg.HeartbeatEvery = 200 * time.Millisecond
	}
	if cfg.HeartbeatTimeout <= 0 {
		cfg.HeartbeatTimeout = 2 * time.Second
	}
	if cfg.BarrierTimeout <= 0 {
		cfg.BarrierTimeout = 2 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	c := &Coordinator{cfg: cfg, log: cfg.Log.With("role", "coordinator"), hwm: map[string]float64{}, eta: backfill.NewETA(nil),
		hbStop: make(chan struct{}), lostCh: make(chan string, len(cfg.Nodes)*4)}
	names := sortedKeys(cfg.Nodes)
	vnodes := cfg.Job.Workload.VnodeCount
	for i, name := range names {
		m := &member{name: name, launch: cfg.Nodes[name],
			vnodes: []Range{{Lo: i * vnodes / len(names), Hi: (i + 1) * vnodes / len(names)}}}
		if m.vnodes[0].Lo == m.vnodes[0].Hi {
			m.vnodes = nil
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := c.start(ctx, m); err != nil {
			c.Close()
			return nil, err
		}
	}
	c.publish()
	c.hbWG.Add(1)
	go c.heartbeats()
	return c, nil
}

// start launches a member's process, connects and opens its job.
func (c *Coordinator) start(ctx context.Context, m *member) error {
	addr, err := m.launch.Start(ctx)
	if err != nil {
		return errors.Wrapf(err, "cluster: start node %s", m.name)
	}
	if m.cc != nil {
		_ = m.cc.Close()
	}
	cc, err := grpc.NewClient(addr, slices.Concat(dialOptions(), []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, c.cfg.DialOptions)...)
	if err != nil {
		return errors.Wrapf(err, "cluster: connect to node %s at %s", m.name, addr)
	}
	c.membersMu.Lock()
	m.addr, m.cc, m.c, m.lost = addr, cc, client{cc}, false
	c.membersMu.Unlock()
	return c.open(ctx, m)
}

// open (re)opens a member's job over its vnodes.
func (c *Coordinator) open(ctx context.Context, m *member) error {
	for len(m.drops) > 0 {
		r := m.drops[0]
		var st Status
		if err := m.c.call(ctx, c.cfg.BarrierTimeout, "Drop", &MoveRequest{Range: r}, &st); err != nil {
			return errors.Wrapf(err, "cluster: node %s: drop vnodes [%d, %d), moved away, before its job reopens", m.name, r.Lo, r.Hi)
		}
		c.log.Info("a move's deferred drop done", "node", m.name, "range", fmt.Sprintf("[%d,%d)", r.Lo, r.Hi))
		m.drops = m.drops[1:]
	}
	var st Status
	if err := m.c.call(ctx, c.cfg.BarrierTimeout, "Open", &OpenRequest{Job: c.cfg.Job, Vnodes: m.vnodes}, &st); err != nil {
		return errors.Wrapf(err, "cluster: open the job on node %s", m.name)
	}
	m.at, m.last = st.Committed, nil
	c.run++
	c.log.Info("node job opened", "node", m.name, "vnodes", fmtRanges(m.vnodes), "step", m.at)
	return nil
}

// heartbeats pings every node at once, every HeartbeatEvery; a node that
// has not answered for HeartbeatTimeout is reported lost (once, until it
// answers again). Each ping may take up to half the timeout: a busy node
// answers late, not never.
func (c *Coordinator) heartbeats() {
	defer c.hbWG.Done()
	t := time.NewTicker(c.cfg.HeartbeatEvery)
	defer t.Stop()
	lastOK := map[string]time.Time{}
	reported := map[string]bool{}
	for {
		select {
		case <-c.hbStop:
			return
		case <-t.C:
		}
		members := c.snapshotMembers()
		errs := make([]error, len(members))
		var wg sync.WaitGroup
		for i, m := range members {
			if m.lost {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				var st Status
				errs[i] = m.c.call(context.Background(), c.cfg.HeartbeatTimeout/2, "Heartbeat", &Empty{}, &st)
			}()
		}
		wg.Wait()
		now := time.Now()
		for i, m := range members {
			if m.lost {
				continue
			}
			if _, ok := lastOK[m.name]; !ok || errs[i] == nil {
				lastOK[m.name], reported[m.name] = now, false
				continue
			}
			if since := now.Sub(lastOK[m.name]); since > c.cfg.HeartbeatTimeout && !reported[m.name] {
				c.log.Warn("node missed its heartbeats", "node", m.name, "for", since.Round(time.Millisecond), "err", errs[i])
				reported[m.name] = true
				select {
				case c.lostCh <- m.name:
				default:
				}
			}
		}
	}
}

// snapshotMembers copies the members as the heartbeats see them.
func (c *Coordinator) snapshotMembers() []member {
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	out := make([]member, len(c.members))
	for i, m := range c.members {
		out[i] = member{name: m.name, c: m.c, lost: m.lost}
	}
	return out
}

// Run injects barriers until every node's job finished, and returns the
// last checkpoint.
func (c *Coordinator) Run(ctx context.Context) (*Checkpoint, error) {
	for {
		if err := ctx.Err(); err != nil {
			return c.lastCkp, err
		}
		ckp, err := c.Step(ctx)
		if err != nil {
			return c.lastCkp, err
		}
		if ckp != nil && ckp.Finished {
			return ckp, nil
		}
	}
}

// Step runs the next cluster step on every node (catching up a node
// behind first), and returns the cluster checkpoint when the step is one.
func (c *Coordinator) Step(ctx context.Context) (*Checkpoint, error) {
	step := c.step + 1
	for attempt := 0; ; attempt++ {
		reports, err := c.barrier(ctx, step)
		if err == nil {
			c.step = step
			ckp := c.checkpoint(step, reports)
			if ckp != nil && !ckp.Finished {
				if err := c.retireMarked(ctx); err != nil {
					return ckp, err
				}
			}
			if c.cfg.OnStep != nil {
				if err := c.cfg.OnStep(ctx, c, step, ckp != nil); err != nil {
					return ckp, err
				}
			}
			return ckp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if attempt >= 5 {
			return nil, errors.Wrapf(err, "cluster: step %d failed %d times", step, attempt+1)
		}
		c.log.Warn("step failed; recovering", "step", step, "err", err)
		if rerr := c.recover(ctx, step); rerr != nil {
			return nil, rerr
		}
	}
}

// failure is a member's failed call.
type failure struct {
	m   *member
	err error
}

func (f failure) Error() string { return fmt.Sprintf("node %s: %v", f.m.name, f.err) }

// barrier runs step on every member: those behind catch up first, then
// all run it at once. A member reported lost by the heartbeats meanwhile
// has its call cancelled: a stopped process would hold it until
// BarrierTimeout.
func (c *Coordinator) barrier(ctx context.Context, step uint64) (map[string]*Report, error) {
	reports := make(map[string]*Report, len(c.members))
	cancels := make(map[string]context.CancelCauseFunc, len(c.members))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var fails []failure
	for _, m := range c.members {
		mctx, cancel := context.WithCancelCause(ctx)
		cancels[m.name] = cancel
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel(nil)
			var err error
			for m.at < step && err == nil {
				rep := &Report{}
				err = c.callBarrier(mctx, m, &BarrierRequest{Step: m.at + 1, Truth: c.cfg.Truth}, rep)
				if err == nil {
					m.at, m.last = m.at+1, rep
				}
			}
			if err != nil && context.Cause(mctx) != nil && ctx.Err() == nil {
				err = context.Cause(mctx)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				fails = append(fails, failure{m, err})
				return
			}
			reports[m.name] = m.last // its step's, run now or in a failed round
		}()
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case name := <-c.lostCh:
				if cancel := cancels[name]; cancel != nil {
					cancel(errors.Newf("node %s missed its heartbeats for %s", name, c.cfg.HeartbeatTimeout))
				}
			case <-done:
				return
			}
		}
	}()
	wg.Wait()
	close(done)
	if len(fails) > 0 {
		return nil, fails[0]
	}
	return reports, nil
}

// callBarrier calls Barrier, and once more if the answer was lost: a node
// answers the step it ran last again (its report kept), so a retry never
// runs a step twice.
func (c *Coordinator) callBarrier(ctx context.Context, m *member, req *BarrierRequest, rep *Report) error {
	err := m.c.call(ctx, c.cfg.BarrierTimeout, "Barrier", req, rep)
	if err == nil || ctx.Err() != nil || status.Code(err) != codes.Unavailable {
		return err
	}
	c.log.Warn("a barrier call failed as unavailable (its answer lost, or the node gone); asking once more", "node", m.name, "step", req.Step, "err", err)
	c.retries++
	return m.c.call(ctx, c.cfg.BarrierTimeout, "Barrier", req, rep)
}

// recover brings back every member whose call failed or whose heartbeats
// stopped: a member that answers is reopened from its last checkpoint; one
// that does not is killed and started again on its directory.
func (c *Coordinator) recover(ctx context.Context, step uint64) error {
	for _, m := range c.members {
		start := time.Now()
		var st Status
		err := m.c.call(ctx, c.cfg.HeartbeatTimeout, "Heartbeat", &Empty{}, &st)
		if err == nil && st.Open && st.Step == m.at {
			continue
		}
		reason, restarted := "its job stopped in a step", err != nil
		if restarted {
			reason = fmt.Sprintf("it does not answer: %v", err)
			c.membersMu.Lock()
			m.lost = true
			c.membersMu.Unlock()
			_ = m.launch.Kill()
			if err := c.start(ctx, m); err != nil {
				return err
			}
		} else if err := c.open(ctx, m); err != nil {
			return err
		}
		defer c.publish()
		if c.cfg.ReassignLost && restarted {
			m.retiring = true
		}
		c.losses = append(c.losses, Loss{Node: m.name, Step: step, Reason: reason, Resumed: m.at, Recovery: time.Since(start), Reassigned: m.retiring})
		c.log.Warn("node recovered", "node", m.name, "reason", reason, "resumed_from_step", m.at, "took", time.Since(start).Round(time.Millisecond))
	}
	// Drain the heartbeat reports of the nodes just recovered.
	for {
		select {
		case <-c.lostCh:
		default:
			return nil
		}
	}
}

// checkpoint sums the reports of a step that every node committed; it
// returns nil when the step was no checkpoint.
func (c *Coordinator) checkpoint(step uint64, reports map[string]*Report) *Checkpoint {
	start := time.Now()
	any, all := false, true
	for _, r := range reports {
		any = any || (r.Checkpoint && r.Started)
		all = all && r.Checkpoint && r.Started
	}
	if !any {
		return nil
	}
	if !all {
		c.log.Warn("nodes disagree on whether a step is a checkpoint", "step", step)
		return nil
	}
	ckp := &Checkpoint{Step: step, Figures: map[string]ClusterFigure{}, Nodes: reports, Finished: true, Truth: -1, Time: time.Now()}
	var lower, upper float64
	var behind, total int64
	for _, r := range reports {
		ckp.Finished = ckp.Finished && r.Finished
		for _, f := range r.Figures {
			cf := ckp.Figures[f.Approach]
			cf.Consumed += f.Consumed
			cf.Total += f.Total
			ckp.Figures[f.Approach] = cf
		}
		lower += r.StatsLower
		upper += r.StatsUpper
		behind += r.TruthBehind
		total += r.TruthTotal
	}
	for name, cf := range ckp.Figures {
		cf.Raw = percent(cf.Consumed, cf.Total)
		if name == "stats" {
			cf.Lower, cf.Upper = percent(lower, cf.Total), percent(upper, cf.Total)
		}
		shown := max(c.hwm[name], math.Min(cf.Raw, 99.99))
		if ckp.Finished {
			shown = 100
		}
		c.hwm[name] = shown
		cf.Shown = shown
		ckp.Figures[name] = cf
	}
	if c.cfg.Truth {
		ckp.Truth = percent(float64(behind), float64(total))
	}
	ckp.ProgressNS = time.Since(start).Nanoseconds()
	ckp.ETA = c.forecast(ckp)
	c.lastCkp = ckp
	c.publish()
	if c.cfg.OnCheckpoint != nil {
		c.cfg.OnCheckpoint(*ckp)
	}
	return ckp
}

// forecast observes a checkpoint's figures with the ETA: the whole job's,
// and each node's as a part (the job ends when its slowest node does).
func (c *Coordinator) forecast(ckp *Checkpoint) backfill.ETAForecast {
	st := ckp.Figures["stats"]
	o := backfill.ETAObservation{Time: ckp.Time, Run: c.run,
		ETAFigure: backfill.ETAFigure{Consumed: st.Consumed, ConsumedLow: st.Lower * st.Total / 100,
			ConsumedHigh: st.Upper * st.Total / 100, Total: st.Total, Finished: ckp.Finished}}
	for _, name := range sortedKeys(ckp.Nodes) {
		r := ckp.Nodes[name]
		f := backfill.FigureOf(r.Figures, "stats")
		o.Actors += r.Actors
		o.SnapshotRows += r.SnapshotRows
		o.Parts = append(o.Parts, backfill.ETAFigure{Consumed: f.Consumed, ConsumedLow: r.StatsLower, ConsumedHigh: r.StatsUpper,
			Total: f.Total, SnapshotRows: r.SnapshotRows, Finished: r.Finished})
	}
	fc, err := c.eta.Observe(o)
	if err != nil {
		c.log.Warn("the ETA refused a checkpoint's figures", "step", ckp.Step, "err", err)
	}
	return fc
}

func percent(a, b float64) float64 {
	if b == 0 {
		return 100
	}
	return 100 * a / b
}

// MoveOptions are a move's options.
type MoveOptions struct {
	// Compact compacts the range into the object store on the source
	// first (MoveRequest.Compact): the move then copies no version.
	Compact bool
}

// Move moves vnode range r from node from to node to, at a checkpoint:
// from exports it (its shared SSTs by reference), to imports it, from
// drops it, and both reopen their jobs with their new vnodes.
func (c *Coordinator) Move(ctx context.Context, from, to string, r Range, opts MoveOptions) (MoveResult, error) {
	src, dst := c.member(from), c.member(to)
	if src == nil || dst == nil || src == dst {
		return MoveResult{}, errors.Newf("cluster: move %v from %q to %q: unknown node or the same node", r, from, to)
	}
	if !owns(src.vnodes, r) {
		return MoveResult{}, errors.Newf("cluster: node %s does not own vnodes [%d, %d) (it owns %s)", from, r.Lo, r.Hi, fmtRanges(src.vnodes))
	}
	start := time.Now()
	var exp ExportResponse
	if err := src.c.call(ctx, c.cfg.BarrierTimeout, "Export", &MoveRequest{Range: r, Compact: opts.Compact}, &exp); err != nil {
		return MoveResult{}, errors.Wrapf(err, "cluster: export %v from %s", r, from)
	}
	var imp MoveResponse
	if err := dst.c.call(ctx, c.cfg.BarrierTimeout, "Import", &ImportRequest{Exports: exp.Exports}, &imp); err != nil {
		// The source still holds the range: reopen it there.
		_ = c.open(ctx, src)
		return MoveResult{}, errors.Wrapf(err, "cluster: import %v into %s", r, to)
	}
	if c.afterImport != nil {
		c.afterImport(from, to)
	}
	// The destination holds the range now: it is its, whatever happens to
	// the source's copy.
	c.membersMu.Lock()
	src.vnodes = subtract(src.vnodes, r)
	dst.vnodes = union(dst.vnodes, r)
	c.membersMu.Unlock()
	deferred := false
	var st Status
	if err := src.c.call(ctx, c.cfg.BarrierTimeout, "Drop", &MoveRequest{Range: r}, &st); err != nil {
		// The source failed between the import and its drop: it drops the
		// range before its job opens again (open), once recovered.
		c.log.Warn("the source of a move did not drop its range; it will before its job reopens", "node", from, "range", fmt.Sprintf("[%d,%d)", r.Lo, r.Hi), "err", err)
		src.drops = append(src.drops, r)
		deferred = true
	} else if err := c.open(ctx, src); err != nil {
		return MoveResult{}, err
	}
	if err := c.open(ctx, dst); err != nil {
		return MoveResult{}, err
	}
	s := exp.Stats
	res := MoveResult{Step: c.step, From: from, To: to, Range: r, Compact: opts.Compact, DropDeferred: deferred, Duration: time.Since(start),
		Stats: MoveStatsJSON{SharedSSTs: s.SharedSSTs, SharedBytes: s.SharedBytes, CopiedVersions: s.CopiedVersions, CopiedBytes: s.CopiedBytes, LiveRows: s.LiveRows}}
	c.moves = append(c.moves, res)
	c.publish()
	c.log.Info("vnodes moved", "range", fmt.Sprintf("[%d,%d)", r.Lo, r.Hi), "from", from, "to", to,
		"shared_ssts", s.SharedSSTs, "shared_bytes", s.SharedBytes, "copied_bytes", s.CopiedBytes, "took", res.Duration.Round(time.Millisecond))
	return res, nil
}

// Kill kills a node's process (SIGKILL); the coordinator notices at its
// next call or heartbeat and recovers it.
func (c *Coordinator) Kill(name string) error {
	m := c.member(name)
	if m == nil {
		return errors.Newf("cluster: no node %q", name)
	}
	c.log.Warn("killing node", "node", name)
	return m.launch.Kill()
}

// Check asks every node to check itself (Verify, MV against upstream).
func (c *Coordinator) Check(ctx context.Context) (map[string]*CheckResponse, error) {
	out := map[string]*CheckResponse{}
	for _, m := range c.members {
		resp := &CheckResponse{}
		if err := m.c.call(ctx, c.cfg.BarrierTimeout, "Check", &Empty{}, resp); err != nil {
			return out, errors.Wrapf(err, "cluster: check node %s", m.name)
		}
		out[m.name] = resp
	}
	return out, nil
}

// Vnodes returns each node's vnode ranges.
func (c *Coordinator) Vnodes() map[string][]Range {
	out := map[string][]Range{}
	for _, m := range c.members {
		out[m.name] = append([]Range(nil), m.vnodes...)
	}
	return out
}

// Retries counts the barrier calls asked again after a lost answer.
func (c *Coordinator) Retries() int { return c.retries }

// Moves and Losses report the moves and the node losses so far.
func (c *Coordinator) Moves() []MoveResult { return c.moves }
func (c *Coordinator) Losses() []Loss      { return c.losses }

func (c *Coordinator) member(name string) *member {
	for _, m := range c.members {
		if m.name == name {
			return m
		}
	}
	return nil
}

// Retire marks a node to leave the cluster: at the next checkpoint its
// vnode ranges move to the other nodes (each range split evenly among
// them), and it stops. At least one node must stay.
func (c *Coordinator) Retire(name string) error {
	m := c.member(name)
	if m == nil {
		return errors.Newf("cluster: no node %q", name)
	}
	staying := 0
	for _, o := range c.members {
		if !o.retiring && o != m {
			staying++
		}
	}
	if staying == 0 {
		return errors.Newf("cluster: node %s is the last node that stays: it cannot retire", name)
	}
	m.retiring = true
	return nil
}

// retireMarked moves the vnodes of the retiring nodes to the others and
// stops them, at a checkpoint.
func (c *Coordinator) retireMarked(ctx context.Context) error {
	for _, m := range slices.Clone(c.members) {
		if !m.retiring {
			continue
		}
		var staying []*member
		for _, o := range c.members {
			if !o.retiring {
				staying = append(staying, o)
			}
		}
		if len(staying) == 0 {
			return errors.Newf("cluster: no node stays to take the vnodes of %s", m.name)
		}
		for _, r := range slices.Clone(m.vnodes) {
			n := min(len(staying), r.Hi-r.Lo)
			for i := range n {
				piece := Range{Lo: r.Lo + i*(r.Hi-r.Lo)/n, Hi: r.Lo + (i+1)*(r.Hi-r.Lo)/n}
				if _, err := c.Move(ctx, m.name, staying[i].name, piece, MoveOptions{Compact: c.cfg.CompactMoves}); err != nil {
					return errors.Wrapf(err, "cluster: retire node %s", m.name)
				}
			}
		}
		if err := m.c.call(ctx, c.cfg.BarrierTimeout, "Stop", &Empty{}, &Empty{}); err != nil {
			c.log.Warn("retired node did not stop cleanly", "node", m.name, "err", err)
		}
		_ = m.cc.Close()
		err := m.launch.Stop()
		c.membersMu.Lock()
		c.members = slices.DeleteFunc(c.members, func(o *member) bool { return o == m })
		c.membersMu.Unlock()
		c.retired = append(c.retired, m.name)
		c.publish()
		c.log.Info("node retired", "node", m.name, "step", c.step, "nodes", len(c.members))
		if err != nil {
			return errors.Wrapf(err, "cluster: retire node %s", m.name)
		}
	}
	return nil
}

// AddNode starts a node and adds it to the cluster without vnodes: it
// runs the job's steps from the first (its part owns nothing) until it is
// at the others' step, at the next barrier, after which moves can give it
// vnodes at any checkpoint (its store commits the same epochs).
func (c *Coordinator) AddNode(ctx context.Context, name string, l Launcher) error {
	if c.member(name) != nil {
		return errors.Newf("cluster: a node %q is already in the cluster", name)
	}
	m := &member{name: name, launch: l}
	if err := c.start(ctx, m); err != nil {
		return err
	}
	c.membersMu.Lock()
	c.members = append(c.members, m)
	c.membersMu.Unlock()
	c.publish()
	c.log.Info("node added", "node", name, "from_step", m.at, "cluster_step", c.step)
	return nil
}

// Retired names the nodes that left the cluster.
func (c *Coordinator) Retired() []string { return c.retired }

// Close stops every node and the heartbeats.
func (c *Coordinator) Close() error {
	select {
	case <-c.hbStop:
	default:
		close(c.hbStop)
	}
	c.hbWG.Wait()
	var first error
	for _, m := range c.members {
		if m.cc != nil {
			_ = m.c.call(context.Background(), 10*time.Second, "Stop", &Empty{}, &Empty{})
			_ = m.cc.Close()
		}
		if err := m.launch.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// owns reports whether rs covers r.
func owns(rs []Range, r Range) bool {
	b, err := bitmapOf(rs, math.MaxInt32)
	if err != nil || r.Lo >= r.Hi {
		return false
	}
	n := b.GetCardinality()
	b.AddRange(uint64(r.Lo), uint64(r.Hi))
	return b.GetCardinality() == n
}

func subtract(rs []Range, r Range) []Range {
	b, _ := bitmapOf(rs, math.MaxInt32)
	b.RemoveRange(uint64(r.Lo), uint64(r.Hi))
	return rangesOf(b)
}

func union(rs []Range, r Range) []Range {
	b, _ := bitmapOf(rs, math.MaxInt32)
	b.AddRange(uint64(r.Lo), uint64(r.Hi))
	return rangesOf(b)
}
