package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Node is one store node: a store whose SSTs are on the cluster's object
// store, and the job's actors of the vnodes the coordinator assigned to
// it. It serves the coordinator's calls (NodeServer), one at a time: the
// coordinator drives it, and a node does nothing between two calls but
// answer heartbeats.
type Node struct {
	name  string
	store *lsm.Store
	log   *slog.Logger

	hb sync.Mutex // guards status for heartbeats, which do not wait for a call
	st Status

	mu     sync.Mutex // one call at a time
	spec   JobSpec
	vnodes *roaring.Bitmap
	src    *tap
	job    *backfill.Job
	actors int
	at     uint64 // the step the job has run to
	done   uint64 // the last step the store committed
	// held are the exports of ranges given away, whose backings the node
	// holds until the range is dropped (the importer has its references).
	held map[Range][]*lsm.VnodeExport
	last *Report // the report of step at
	// statsTime is the stats estimator's time at the last checkpoint.
	statsTime time.Duration
	// backup names the store's backup in the object store ("": none): the
	// node uploads one after every commit, import and drop, before it
	// answers (lsm.Store.Backup).
	backup string
}

var _ NodeServer = (*Node)(nil)

// tables are the job's tables, bench's table ids on every node (a range
// of a table moves to a node that has the same table): the upstream, the
// MV, the backfill's state and, for a snapshot backfill, its log store.
func (n *Node) tables() []uint32 {
	t := []uint32{bench.UpstreamTable, bench.MVTable, bench.StateTable}
	if n.spec.Mode == "snapshot" {
		t = append(t, bench.LogStoreTable)
	}
	return t
}

// NewNode returns a node over an open store (its object store the
// cluster's). With a backup name, the node backs the store up under that
// name (lsm.Store.Backup) after every checkpoint it commits and every
// import and drop of a vnode range, before it answers: what the
// coordinator counts as committed is then in the object store, and a node
// whose disk is lost comes back from it (Serve, lsm.Restore). The store
// stays the caller's to close after Stop.
func NewNode(name string, store *lsm.Store, backup string, log *slog.Logger) *Node {
	if log == nil {
		log = slog.Default()
	}
	n := &Node{name: name, store: store, log: log.With("node", name), held: map[Range][]*lsm.VnodeExport{}, backup: backup}
	n.st = Status{Node: name, Epoch: store.CommittedEpoch()}
	return n
}

// setStatus publishes the node's status for heartbeats.
func (n *Node) setStatus() {
	st := Status{Node: n.name, Epoch: n.store.CommittedEpoch(), Vnodes: rangesOf(n.vnodes), Open: n.job != nil, Step: n.at}
	if n.job != nil {
		st.Finished, st.Committed = n.job.Finished(), n.done
	}
	n.hb.Lock()
	n.st = st
	n.hb.Unlock()
}

// Heartbeat implements NodeServer: the node's status, without waiting for
// a call in progress.
func (n *Node) Heartbeat(context.Context, *Empty) (*Status, error) {
	n.hb.Lock()
	defer n.hb.Unlock()
	st := n.st
	return &st, nil
}

// Open implements NodeServer: it (re)opens the job over the vnodes asked,
// from the store's last checkpoint.
func (n *Node) Open(ctx context.Context, req *OpenRequest) (*Status, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.setStatus()
	if err := n.closeJob(); err != nil {
		return nil, err
	}
	var mode backfill.JobMode
	switch req.Job.Mode {
	case "", "arrangement":
	case "snapshot":
		mode = backfill.ModeSnapshot
	default:
		return nil, status.Errorf(codes.InvalidArgument, "node %s: job mode %q: want arrangement or snapshot", n.name, req.Job.Mode)
	}
	vnodes, err := bitmapOf(req.Vnodes, req.Job.Workload.VnodeCount)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	g, err := workload.New(req.Job.Workload)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	src := &tap{Source: genjob.NewPart(g, vnodes)}
	actors := max(1, req.Job.Actors)
	if n := int(vnodes.GetCardinality()); n > 0 {
		actors = min(actors, n)
	}
	jc := backfill.JobConfig{
		Store: n.store, Vnodes: vnodes,
		Actors: actors, CheckpointEvery: max(1, req.Job.CheckpointEvery),
		ChunkSize: req.Job.ChunkSize, BarrierRows: req.Job.BarrierRows,
		Estimators: []backfill.Estimator{backfill.RowCountEstimator{}, backfill.StatsEstimator{}},
		Source:     src, Unchecked: true,
		OnEstimate: func(approach string, estimate func()) {
			start := time.Now()
			estimate()
			if approach == "stats" {
				n.statsTime = time.Since(start)
			}
		},
		Upstream: g.Params().TableDef(bench.UpstreamTable), MV: bench.MVTable, State: bench.StateTable, Meta: bench.MetaTable,
		Mode: mode,
	}
	if mode == backfill.ModeSnapshot {
		jc.LogStore = bench.LogStoreTable
	}
	job, err := backfill.OpenJob(jc)
	if err != nil {
		return nil, errors.Wrapf(err, "node %s: open the job over vnodes %v", n.name, req.Vnodes)
	}
	n.spec, n.vnodes, n.src, n.job, n.actors = req.Job, vnodes, src, job, actors
	n.at, n.done, n.last = src.at.Step, src.at.Step, nil
	n.log.Info("job opened", "vnodes", fmtRanges(req.Vnodes), "step", n.at, "epoch", n.store.CommittedEpoch())
	n.setStatus()
	n.hb.Lock()
	st := n.st
	n.hb.Unlock()
	return &st, nil
}

func (n *Node) closeJob() error {
	if n.job == nil {
		return nil
	}
	err := n.job.Close()
	n.job, n.src = nil, nil
	if err != nil {
		return errors.Wrapf(err, "node %s: close the job", n.name)
	}
	return nil
}

// Barrier implements NodeServer: it runs step req.Step, which must be the
// one after the node's last.
func (n *Node) Barrier(ctx context.Context, req *BarrierRequest) (*Report, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.setStatus()
	if n.job == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s: no job open", n.name)
	}
	if req.Step == n.at && n.last != nil && n.last.Step == req.Step {
		// The coordinator lost the answer: the same report again.
		return n.last, nil
	}
	if req.Step != n.at+1 {
		return nil, status.Errorf(codes.FailedPrecondition, "node %s: asked step %d, but its next step is %d", n.name, req.Step, n.at+1)
	}
	before := n.store.CommittedEpoch()
	rec, ok, err := n.job.Step(ctx)
	if err != nil {
		// The job holds the step's uncommitted work: reopen it from the
		// store, where the coordinator resumes it.
		n.log.Warn("step failed; the job reopens from the last checkpoint", "step", req.Step, "err", err)
		_ = n.closeJob()
		return nil, status.Errorf(codes.Aborted, "node %s: step %d: %v", n.name, req.Step, err)
	}
	n.at = req.Step
	rep := &Report{Step: req.Step, Checkpoint: n.store.CommittedEpoch() != before, Epoch: n.store.CommittedEpoch(),
		Vnodes: int(n.vnodes.GetCardinality())}
	if rep.Checkpoint {
		n.done = req.Step
		if err := n.backUp(ctx, rep); err != nil {
			return nil, err
		}
	}
	n.last = rep
	if !ok {
		return rep, nil
	}
	rep.Started, rep.Finished, rep.Figures, rep.SnapshotRows, rep.Actors, rep.Phase = true, rec.Finished, rec.Figures, rec.SnapshotRows, n.actors, rec.Phase
	if f := rec.Figure("stats"); f.Bounds != nil {
		rep.StatsLower, rep.StatsUpper = f.Bounds.Lower*f.Total/100, f.Bounds.Upper*f.Total/100
	} else {
		rep.StatsLower, rep.StatsUpper = f.Consumed, f.Consumed
	}
	rep.ProgressNS = n.statsTime.Nanoseconds()
	if req.Truth {
		if rep.TruthBehind, rep.TruthTotal, err = n.truth(ctx, rec); err != nil {
			return nil, status.Errorf(codes.Internal, "node %s: truth at step %d: %v", n.name, req.Step, err)
		}
	}
	return rep, nil
}

// truth is the truth's numbers at a checkpoint: a scan of the node's
// vnodes at the committed epoch (a snapshot backfill's: at its pinned
// epoch, and its log store's rows).
func (n *Node) truth(ctx context.Context, rec backfill.Record) (behind, total int64, err error) {
	t := backfilltest.Truth{Store: n.store, Oracles: []backfilltest.Oracle{backfilltest.ScanOracle{Store: n.store, Table: bench.UpstreamTable}}}
	if n.spec.Mode == "snapshot" {
		t.LogStore = bench.LogStoreTable
	}
	return t.Rows(ctx, &rec)
}

// Export implements NodeServer: the node closes its job (it must be at a
// checkpoint) and exports the range of every table of the job; it holds
// the exports until Drop.
func (n *Node) Export(ctx context.Context, req *MoveRequest) (*ExportResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.setStatus()
	if err := n.atCheckpoint("export"); err != nil {
		return nil, err
	}
	if err := n.closeJob(); err != nil {
		return nil, err
	}
	if _, ok := n.held[req.Range]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "node %s: range %v is already exported", n.name, req.Range)
	}
	if req.Compact {
		start := time.Now()
		for _, t := range n.tables() {
			if err := n.store.CompactRange(ctx, t, req.Range.Lo, req.Range.Hi); err != nil {
				return nil, status.Errorf(codes.Internal, "node %s: compact vnodes %v of table %d before their export: %v", n.name, req.Range, t, err)
			}
		}
		n.log.Info("range compacted into the object store", "range", req.Range, "took", time.Since(start).Round(time.Millisecond))
	}
	resp := &ExportResponse{}
	var held []*lsm.VnodeExport
	for _, t := range n.tables() {
		e, err := n.store.ExportVnodes(ctx, t, req.Range.Lo, req.Range.Hi)
		if err == nil {
			var b []byte
			if b, err = e.MarshalBinary(); err == nil {
				held = append(held, e)
				resp.Exports = append(resp.Exports, b)
				resp.Stats = addMoveStats(resp.Stats, e.Stats())
				continue
			}
			e.Release()
		}
		for _, h := range held {
			h.Release()
		}
		return nil, status.Errorf(codes.Internal, "node %s: export vnodes %v of table %d: %v", n.name, req.Range, t, err)
	}
	n.held[req.Range] = held
	n.log.Info("range exported", "range", req.Range, "shared_ssts", resp.Stats.SharedSSTs, "copied_bytes", resp.Stats.CopiedBytes)
	return resp, nil
}

// atCheckpoint refuses a move in the middle of a checkpoint interval: the
// job's steps since its last checkpoint are not committed.
func (n *Node) atCheckpoint(what string) error {
	if n.job != nil && n.at != n.done {
		return status.Errorf(codes.FailedPrecondition, "node %s: %s at step %d, after the last checkpoint (step %d)", n.name, what, n.at, n.done)
	}
	return nil
}

// Import implements NodeServer: the node closes its job and imports the
// exports; Open then gives it the range.
func (n *Node) Import(ctx context.Context, req *ImportRequest) (*MoveResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.setStatus()
	if err := n.atCheckpoint("import"); err != nil {
		return nil, err
	}
	if err := n.closeJob(); err != nil {
		return nil, err
	}
	resp := &MoveResponse{}
	for i, b := range req.Exports {
		e, err := lsm.DecodeVnodeExport(b)
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "node %s: export %d: %v", n.name, i, err)
		}
		st, err := n.store.ImportVnodes(ctx, e)
		e.Release()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "node %s: import export %d: %v", n.name, i, err)
		}
		resp.Stats = addMoveStats(resp.Stats, st)
	}
	if err := n.backUp(ctx, nil); err != nil {
		return nil, err
	}
	n.log.Info("range imported", "exports", len(req.Exports), "live_rows", resp.Stats.LiveRows)
	return resp, nil
}

// backUp backs the store up, if the node has a backup name, and counts
// it in rep (if not nil). A failed backup fails the call: the commit,
// import or drop before it is on the node's disk only, and the
// coordinator does not count it.
func (n *Node) backUp(ctx context.Context, rep *Report) error {
	if n.backup == "" {
		return nil
	}
	info, err := n.store.Backup(ctx, n.backup)
	if err != nil {
		n.log.Warn("backup failed", "err", err)
		return status.Errorf(codes.Unavailable, "node %s: backup to the object store: %v", n.name, err)
	}
	if rep != nil {
		rep.BackupBytes, rep.BackupNS = info.Bytes, info.Took.Nanoseconds()
	}
	return nil
}

// Drop implements NodeServer: the node releases the range's exports and
// drops it from every table of the job (the importer holds it).
func (n *Node) Drop(ctx context.Context, req *MoveRequest) (*Status, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.setStatus()
	if err := n.closeJob(); err != nil {
		return nil, err
	}
	for _, t := range n.tables() {
		if err := n.store.DropVnodes(ctx, t, req.Range.Lo, req.Range.Hi); err != nil {
			return nil, status.Errorf(codes.Internal, "node %s: drop vnodes %v of table %d: %v", n.name, req.Range, t, err)
		}
	}
	// Dropped: the destination holds the range and its own references
	// on the shared SSTs.
	for _, e := range n.held[req.Range] {
		e.Release()
	}
	delete(n.held, req.Range)
	if err := n.backUp(ctx, nil); err != nil {
		return nil, err
	}
	n.log.Info("range dropped", "range", req.Range)
	n.setStatus()
	n.hb.Lock()
	st := n.st
	n.hb.Unlock()
	return &st, nil
}

// Check implements NodeServer: Verify (every statistic against the data),
// and, once the node's job finished, its MV against its upstream.
func (n *Node) Check(ctx context.Context, _ *Empty) (*CheckResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	resp := &CheckResponse{}
	rep, err := n.store.Verify()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "node %s: verify: %v", n.name, err)
	}
	resp.LiveRows = rep.Rows
	resp.Problems = slices.Concat(rep.Differences, rep.Corrupt, rep.Unchecked)
	// A node holds rows of its own vnodes only: a range moved away is
	// dropped.
	if n.vnodes != nil {
		live := n.store.Stats().Live
		others := roaring.Flip(n.vnodes, 0, uint64(n.spec.Workload.VnodeCount))
		for _, t := range n.tables() {
			if rows := live.Sum(t, others).Rows; rows != 0 {
				resp.Problems = append(resp.Problems, fmt.Sprintf("table %d holds %d live rows of vnodes the node does not own", t, rows))
			}
		}
	}
	if n.job != nil && n.job.Finished() {
		// Before its end a backfill's MV holds only what its cursors
		// passed.
		if err := n.job.Compare(); err != nil {
			resp.Problems = append(resp.Problems, fmt.Sprintf("MV vs upstream: %v", err))
		} else {
			resp.MVMatches = true
		}
	}
	n.setStatus()
	n.hb.Lock()
	resp.Status = n.st
	n.hb.Unlock()
	return resp, nil
}

// Stop implements NodeServer: the node closes its job; its process
// exits once the call returns (Serve's caller closes the store).
func (n *Node) Stop(context.Context, *Empty) (*Empty, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for r, es := range n.held {
		for _, e := range es {
			e.Release()
		}
		delete(n.held, r)
	}
	return &Empty{}, n.closeJob()
}

func addMoveStats(a, b lsm.MoveStats) lsm.MoveStats {
	a.SharedSSTs += b.SharedSSTs
	a.SharedBytes += b.SharedBytes
	a.CopiedVersions += b.CopiedVersions
	a.CopiedBytes += b.CopiedBytes
	a.CopiedSSTBytes += b.CopiedSSTBytes
	a.LiveRows += b.LiveRows
	a.LiveBytes += b.LiveBytes
	a.Compacted = a.Compacted || b.Compacted
	return a
}

// bitmapOf is the vnode set of ranges, each within [0, count).
func bitmapOf(rs []Range, count int) (*roaring.Bitmap, error) {
	b := roaring.New()
	for _, r := range rs {
		if r.Lo < 0 || r.Hi > count || r.Lo >= r.Hi {
			return nil, errors.Newf("vnode range [%d, %d) is not within [0, %d)", r.Lo, r.Hi, count)
		}
		b.AddRange(uint64(r.Lo), uint64(r.Hi))
	}
	return b, nil
}

// rangesOf is a vnode set as its maximal ranges.
func rangesOf(b *roaring.Bitmap) []Range {
	if b == nil {
		return nil
	}
	var out []Range
	it := b.Iterator()
	for it.HasNext() {
		v := int(it.Next())
		if k := len(out); k > 0 && out[k-1].Hi == v {
			out[k-1].Hi++
			continue
		}
		out = append(out, Range{v, v + 1})
	}
	return out
}

func fmtRanges(rs []Range) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("[%d,%d)", r.Lo, r.Hi)
	}
	return s
}

// tap is the job's source, which tells the node where the job resumed.
type tap struct {
	backfill.Source
	at backfill.Position
}

func (t *tap) Resume(at backfill.Position) error {
	t.at = at
	return t.Source.Resume(at)
}

func (t *tap) BackfillStep() uint64 {
	if l, ok := t.Source.(backfill.Loader); ok {
		return l.BackfillStep()
	}
	return 0
}

func (t *tap) Finished(step uint64) {
	if f, ok := t.Source.(backfill.FinishListener); ok {
		f.Finished(step)
	}
}
