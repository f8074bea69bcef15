package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/cluster"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vbauerster/mpb/v8"
)

// clusterReport is the JSON report of a backfill over several nodes.
type clusterReport struct {
	Parameters  map[string]any              `json:"parameters"`
	Checkpoints []cluster.Checkpoint        `json:"checkpoints"`
	Moves       []cluster.MoveResult        `json:"moves"`
	Losses      []cluster.Loss              `json:"node_losses"`
	Kills       []clusterKill               `json:"kills"`
	Vnodes      map[string][]cluster.Range  `json:"vnodes"`
	Checks      map[string]*clusterCheckOut `json:"checks"`
	MVMatches   bool                        `json:"mv_matches_upstream"`
	// ErrorPP is the stats figure's error against the truth over the
	// checkpoints, in percentage points.
	ErrorMeanPP float64 `json:"stats_error_mean_pp"`
	ErrorMaxPP  float64 `json:"stats_error_max_pp"`
	Monotone    bool    `json:"displayed_monotone"`
	WallS       float64 `json:"wall_s"`
}

type clusterKill struct {
	Node string `json:"node"`
	Step uint64 `json:"step"`
	// DiskLost says the node's directory was deleted too (--lose-disk).
	DiskLost bool `json:"disk_lost,omitempty"`
}

type clusterCheckOut struct {
	Problems  []string `json:"problems"`
	LiveRows  int64    `json:"live_rows"`
	MVMatches bool     `json:"mv_matches"`
}

// runCluster runs the backfill over f.nodes node processes (lsmstats
// node) on the object store, with this process as their coordinator.
func runCluster(f *backfillFlags, p workload.Params, stdout, stderr io.Writer) (int, error) {
	if f.objectStore == "" {
		return usageError(errors.New("--nodes needs --object-store: the nodes share their SSTs there"))
	}
	if f.onNodeLoss != "reassign" && f.onNodeLoss != "restart" {
		return usageError(errors.Newf("--on-node-loss %q: want reassign or restart", f.onNodeLoss))
	}
	if f.upstreams > 1 {
		return usageError(errors.New("--nodes runs a backfill of one upstream table"))
	}
	exe, err := os.Executable()
	if err != nil {
		return exitError, err
	}
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "lsmstats-cluster-"); err != nil {
			return exitError, err
		}
		defer os.RemoveAll(dir)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nodes := map[string]cluster.Launcher{}
	// Each node backs its store up after every checkpoint under a name of
	// this run's: a node that lost its directory comes back from it.
	run := fmt.Sprintf("%s-%d", time.Now().UTC().Format("20060102T150405"), os.Getpid())
	for i := range f.nodes {
		name := fmt.Sprintf("node-%d", i)
		nodes[name] = &cluster.Process{Args: []string{exe, "node", "--dir", filepath.Join(dir, name),
			"--object-store", f.objectStore, "--name", name, "--backup", "cluster/" + run + "/" + name}, Log: prefixWriter(stderr, name+": ")}
	}
	rep := &clusterReport{Parameters: parameters(f, p), Monotone: true}
	rep.Parameters["nodes"] = f.nodes
	start := time.Now()
	kills := slices.Clone(f.killNodeAt)
	moves := slices.Clone(f.moveAt)
	ckpts, finished := 0, false
	ui := newProgressUI(f.bars, !f.noTruth, stdout)
	var nodesBar *mpb.Bar
	var prev map[string]float64
	cfg := cluster.CoordinatorConfig{
		Job: cluster.JobSpec{Workload: p, Mode: f.mode, Actors: f.actors, CheckpointEvery: f.checkpointEvery,
			ChunkSize: f.chunkSize, BarrierRows: f.barrierRows},
		Nodes: nodes, Truth: !f.noTruth, Log: log, ReassignLost: f.onNodeLoss == "reassign", CompactMoves: true,
		OnCheckpoint: func(c cluster.Checkpoint) {
			ckpts++
			finished = c.Finished
			rep.Checkpoints = append(rep.Checkpoints, c)
			st, rc := c.Figures["stats"], c.Figures["rowcount"]
			for name, fig := range c.Figures {
				if prev != nil && fig.Shown < prev[name] {
					rep.Monotone = false
				}
			}
			prev = map[string]float64{"stats": st.Shown, "rowcount": rc.Shown}
			var per []string
			for _, name := range slices.Sorted(maps.Keys(c.Nodes)) {
				r := c.Nodes[name]
				fs := figureOf(r, "stats")
				per = append(per, fmt.Sprintf("%s %.1f%%", name, percentOf(fs.Consumed, fs.Total)))
			}
			if ui.bars {
				ui.update(clusterRecord(c), false)
				if nodesBar == nil {
					nodesBar = ui.bar("nodes", 1)
				}
				ui.setText("nodes", strings.Join(per, ", "))
				return
			}
			truth := ""
			if c.Truth >= 0 {
				truth = fmt.Sprintf("  truth %6.2f%%", c.Truth)
			}
			eta := ""
			if c.ETA.Shown() {
				eta = fmt.Sprintf("  ETA %s [%s–%s]", backfill.FormatETA(c.ETA.Remaining), backfill.FormatETA(c.ETA.Low), backfill.FormatETA(c.ETA.High))
			}
			fmt.Fprintf(stdout, "checkpoint %3d step %4d  stats %6.2f%% [%.2f–%.2f]%s  rowcount %6.2f%%%s  (%s)\n",
				ckpts, c.Step, st.Shown, st.Lower, st.Upper, eta, rc.Shown, truth, strings.Join(per, ", "))
		},
		OnStep: func(ctx context.Context, c *cluster.Coordinator, step uint64, checkpoint bool) error {
			if !checkpoint || finished {
				return nil
			}
			if len(moves) > 0 && ckpts >= moves[0] {
				moves = moves[1:]
				if err := moveOne(ctx, c); err != nil {
					return err
				}
			}
			if len(kills) > 0 && ckpts >= kills[0] {
				kills = kills[1:]
				names := slices.Sorted(maps.Keys(c.Vnodes()))
				victim := names[len(rep.Kills)%len(names)]
				rep.Kills = append(rep.Kills, clusterKill{Node: victim, Step: step, DiskLost: f.loseDisk})
				if !f.loseDisk {
					fmt.Fprintf(stdout, "killing %s (SIGKILL) after step %d\n", victim, step)
					return c.Kill(victim)
				}
				fmt.Fprintf(stdout, "killing %s (SIGKILL) after step %d and deleting its directory\n", victim, step)
				if err := c.Kill(victim); err != nil {
					return err
				}
				return os.RemoveAll(filepath.Join(dir, victim))
			}
			return nil
		},
	}
	coord, err := cluster.NewCoordinator(ctx, cfg)
	if err != nil {
		return exitError, err
	}
	defer coord.Close()
	if f.metricsAddr != "" {
		addr, stop, err := serveClusterMetrics(f.metricsAddr, coord)
		if err != nil {
			return exitError, err
		}
		defer stop()
		rep.Parameters["metrics_addr"] = addr
		fmt.Fprintf(stderr, "lsmstats backfill: the coordinator's metrics at http://%s/metrics\n", addr)
	}
	_, err = coord.Run(ctx)
	if err != nil {
		ui.stop()
	} else {
		if nodesBar != nil {
			nodesBar.SetTotal(-1, true)
		}
		ui.finish()
	}
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "lsmstats backfill: interrupted; every node keeps its last checkpoint")
			return exitInterrupted, nil
		}
		return exitError, err
	}
	checks, err := coord.Check(ctx)
	if err != nil {
		return exitError, err
	}
	rep.Moves, rep.Losses, rep.Vnodes = coord.Moves(), coord.Losses(), coord.Vnodes()
	rep.Checks, rep.MVMatches = map[string]*clusterCheckOut{}, true
	for name, c := range checks {
		rep.Checks[name] = &clusterCheckOut{Problems: c.Problems, LiveRows: c.LiveRows, MVMatches: c.MVMatches}
		rep.MVMatches = rep.MVMatches && c.MVMatches && len(c.Problems) == 0
	}
	var sum float64
	for _, c := range rep.Checkpoints {
		if c.Truth < 0 {
			continue
		}
		e := abs(c.Figures["stats"].Raw - c.Truth)
		sum += e
		rep.ErrorMaxPP = max(rep.ErrorMaxPP, e)
	}
	if n := len(rep.Checkpoints); n > 0 {
		rep.ErrorMeanPP = sum / float64(n)
	}
	rep.WallS = time.Since(start).Seconds()
	for _, m := range rep.Moves {
		fmt.Fprintf(stdout, "moved vnodes [%d, %d) %s → %s at step %d: %d shared SSTs (%d bytes) by reference, %d bytes copied, %s\n",
			m.Range.Lo, m.Range.Hi, m.From, m.To, m.Step, m.Stats.SharedSSTs, m.Stats.SharedBytes, m.Stats.CopiedBytes, m.Duration.Round(time.Millisecond))
	}
	for _, l := range rep.Losses {
		then := "it goes on with its vnodes"
		if l.Reassigned {
			then = "its vnodes went to the live nodes at the next checkpoint"
		}
		fmt.Fprintf(stdout, "node %s lost at step %d (%s); recovered from its checkpoint at step %d in %s; %s\n",
			l.Node, l.Step, l.Reason, l.Resumed, l.Recovery.Round(time.Millisecond), then)
	}
	fmt.Fprintf(stdout, "done in %.1fs: stats error mean %.3f pp, max %.3f pp; MV = upstream on every node: %t\n",
		rep.WallS, rep.ErrorMeanPP, rep.ErrorMaxPP, rep.MVMatches)
	if f.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return exitError, err
		}
		// Its directory was made before the run (prepareOutputPath).
		if err := os.WriteFile(f.jsonPath, b, 0o644); err != nil {
			return exitError, err
		}
	}
	if !rep.MVMatches {
		return exitMVMismatch, errors.New("a node's MV does not match its upstream, or its check found problems (see the report)")
	}
	return exitOK, nil
}

// moveOne moves half of the vnodes of the node with the most to the node
// with the fewest.
func moveOne(ctx context.Context, c *cluster.Coordinator) error {
	vn := c.Vnodes()
	var most, least string
	count := func(rs []cluster.Range) int {
		n := 0
		for _, r := range rs {
			n += r.Hi - r.Lo
		}
		return n
	}
	for _, name := range slices.Sorted(maps.Keys(vn)) {
		if most == "" || count(vn[name]) > count(vn[most]) {
			most = name
		}
		if least == "" || count(vn[name]) < count(vn[least]) {
			least = name
		}
	}
	rs := vn[most]
	if most == least || len(rs) == 0 {
		return nil
	}
	last := rs[len(rs)-1]
	half := cluster.Range{Lo: last.Lo + (last.Hi-last.Lo)/2, Hi: last.Hi}
	if half.Lo == half.Hi {
		return nil
	}
	_, err := c.Move(ctx, most, least, half, cluster.MoveOptions{Compact: true})
	return err
}

func figureOf(r *cluster.Report, approach string) (f struct{ Consumed, Total float64 }) {
	for _, x := range r.Figures {
		if x.Approach == approach {
			f.Consumed, f.Total = x.Consumed, x.Total
		}
	}
	return f
}

func percentOf(a, b float64) float64 {
	if b == 0 {
		return 100
	}
	return 100 * a / b
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// prefixWriter writes each line to w with a prefix.
func prefixWriter(w io.Writer, prefix string) io.Writer { return &prefixed{w: w, prefix: prefix} }

type prefixed struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *prefixed) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := slices.Index(p.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		if _, err := fmt.Fprintf(p.w, "%s%s\n", p.prefix, p.buf[:i]); err != nil {
			return len(b), err
		}
		p.buf = p.buf[i+1:]
	}
}

// serveClusterMetrics serves the coordinator's metrics at
// http://addr/metrics until stop.
func serveClusterMetrics(addr string, c *cluster.Coordinator) (string, func(), error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, errors.Wrapf(err, "--metrics-addr %s", addr)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c.Collector())
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: metricsTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	return l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), metricsTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// clusterRecord is a cluster checkpoint as the progress bars show a job's:
// the summed figures, displayed with their bounds.
func clusterRecord(c cluster.Checkpoint) *recordJSON {
	r := &recordJSON{Barrier: c.Step, TimeNS: c.Time.UnixNano(), ETA: etaOf(c.ETA), Truth: c.Truth, Finished: c.Finished}
	for _, name := range []string{"rowcount", "stats"} {
		f, ok := c.Figures[name]
		if !ok {
			continue
		}
		shown := fmt.Sprintf("%.2f%%", f.Shown)
		if name == "stats" {
			shown = fmt.Sprintf("%.2f%% [%.2f–%.2f]", f.Shown, f.Lower, f.Upper)
		}
		r.Figures = append(r.Figures, backfill.Figure{Approach: name, Consumed: f.Consumed, Total: f.Total, Raw: f.Raw, Pct: f.Shown, Shown: shown})
	}
	return r
}
