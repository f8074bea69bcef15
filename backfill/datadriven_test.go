package backfill_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/harness/storetest"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestDataDriven runs testdata/store/backfill/{jobs,snapshot}/* (at the
// repository top): a small job, barrier by barrier, on the shared store
// harness (package harness/storetest, whose common commands such as live,
// stats full or verify apply to the job's store too), with the job commands:
//
//	job [mode=snapshot] workload=NAME rows=N vnodes=N actors=N barrier-rows=N
//	    [chunk-size=N] [seed=N] [checkpoint-every=N] [during-steps=N]
//	    [update-during-pct=N] [order=interleaved|vnode]
//	                   open the store and the job (load phase included).
//	                   mode=snapshot: a snapshot backfill
//	                   (JobConfig.Mode = ModeSnapshot) whose truth is the
//	                   scan oracle's at the snapshot epoch, and whose
//	                   displayed figures must follow the display rules
//	steps n=N          run N source steps; print each checkpoint: cursors,
//	                   state, truth and both approaches' raw and shown
//	                   figures (snapshot: the phase, and the log rows
//	                   consumed and pending)
//	crash              (the harness's) drop the job and the store without
//	                   closing the job: its uncommitted work is lost as in a
//	                   kill; the store is closed so that it can be reopened
//	                   in-process
//	restart [actors=N] reopen; print the figure shown before the first barrier
//	finish             run to the end; print the last checkpoint (snapshot:
//	                   and the phases seen) and whether the MV equals the
//	                   upstream table
func TestDataDriven(t *testing.T) {
	storetest.Walk(t, "../testdata/store/backfill", func(t *testing.T, h *storetest.Harness) { newJobCommands(t, h) })
}

// jobCommands is the state of the job commands of one file.
type jobCommands struct {
	h        *storetest.Harness
	snapshot bool
	j        *backfill.Job
	cfg      backfill.JobConfig
	p        workload.Params
	recs     []backfill.Record
	display  backfilltest.Display
}

func newJobCommands(t *testing.T, h *storetest.Harness) {
	c := &jobCommands{h: h}
	h.Commands["job"] = c.job
	h.Commands["steps"] = c.steps
	h.Commands["restart"] = c.restart
	h.Commands["finish"] = c.finish
	h.Crash = func(s *lsm.Store) {
		// No Job.Close: writers' uncommitted epochs are simply lost.
		require.NoError(t, s.Close())
		c.j = nil
	}
	h.AtEnd = func(t *testing.T) { c.closeJob(t) }
}

func (c *jobCommands) closeJob(t *testing.T) {
	if c.j != nil {
		require.NoError(t, c.j.Close())
		c.j = nil
	}
}

func (c *jobCommands) open(t *testing.T, actors int) {
	c.closeJob(t)
	require.NoError(t, c.h.OpenWith(t, &lsm.Options{Logger: lsm.QuietLogger(nil)}))
	s := c.h.Store
	g, err := workload.New(c.p)
	require.NoError(t, err)
	c.cfg.Store, c.cfg.Actors = s, actors
	c.cfg.Source, c.cfg.Score = genjob.Source{G: g}, backfilltest.Oracles(genjob.Oracle{G: g})
	if c.snapshot {
		c.cfg.Score = backfilltest.Truth{Oracles: []backfilltest.Oracle{backfilltest.ScanOracle{Store: s, Table: 1}}, Store: s, LogStore: c.cfg.LogStore}.Score
	}
	c.cfg.OnCheckpoint = func(r backfill.Record) {
		c.recs = append(c.recs, r)
		if c.snapshot {
			require.NoError(t, c.display.Add(r))
		}
	}
	c.j, err = backfill.OpenJob(c.cfg)
	require.NoError(t, err)
}

func (c *jobCommands) print(recs []backfill.Record) string {
	if c.snapshot {
		return printPhaseRecords(recs)
	}
	return printRecords(recs)
}

func (c *jobCommands) job(t *testing.T, _ *storetest.Harness, td *datadriven.TestData) string {
	c.recs = nil
	switch m := strArg(td, "mode", "online"); m {
	case "online":
	case "snapshot":
		c.snapshot = true
	default:
		t.Fatalf("job: mode=%s", m)
	}
	var err error
	c.p, err = workload.Preset(strArg(td, "workload", "uniform"), intArg(td, "rows", 40), intArg(td, "vnodes", 4), uint64(intArg(td, "seed", 1)))
	require.NoError(t, err)
	c.p.BatchRows = c.p.Rows
	c.p.DuringSteps = intArg(td, "during-steps", 4)
	if u := intArg(td, "update-during-pct", -1); u >= 0 {
		c.p.UpdateDuring = float64(u) / 100
	}
	c.cfg = backfill.JobConfig{Upstream: c.p.TableDef(1), MV: 2, State: 3, Meta: 4, KeepRecords: true,
		ChunkSize: intArg(td, "chunk-size", 2), BarrierRows: intArg(td, "barrier-rows", 3),
		CheckpointEvery: intArg(td, "checkpoint-every", 1)}
	c.cfg.SnapshotOrder, err = backfill.ParseSnapshotOrder(strArg(td, "order", "interleaved"))
	require.NoError(t, err)
	if c.snapshot {
		c.cfg.Mode, c.cfg.LogStore = backfill.ModeSnapshot, 5
	}
	c.open(t, intArg(td, "actors", 1))
	return fmt.Sprintf("backfill starts at step %d", c.cfg.Source.(backfill.Loader).BackfillStep())
}

func (c *jobCommands) steps(t *testing.T, _ *storetest.Harness, td *datadriven.TestData) string {
	c.recs = nil
	for range intArg(td, "n", 1) {
		_, _, err := c.j.Step(context.Background())
		require.NoError(t, err)
	}
	return c.print(c.recs)
}

func (c *jobCommands) restart(t *testing.T, _ *storetest.Harness, td *datadriven.TestData) string {
	c.recs = nil
	c.open(t, intArg(td, "actors", c.cfg.Actors))
	if r := c.j.Initial(); r != nil {
		if c.snapshot {
			require.NoError(t, c.display.Add(*r))
		}
		return "before the first barrier:\n" + c.print([]backfill.Record{*r})
	}
	return "not started"
}

func (c *jobCommands) finish(t *testing.T, _ *storetest.Harness, _ *datadriven.TestData) string {
	c.recs = nil
	res, err := c.j.Run(context.Background())
	require.NoError(t, err)
	out := c.print(res.Records[len(res.Records)-1:])
	if c.snapshot {
		require.NoError(t, c.display.Done())
		var phases []string
		for _, r := range res.Records {
			if len(phases) == 0 || phases[len(phases)-1] != r.Phase {
				phases = append(phases, r.Phase)
			}
		}
		out += "phases: " + strings.Join(phases, " -> ") + "\n"
	}
	if err := c.j.Compare(); err != nil {
		return out + "mv: " + err.Error()
	}
	return out + fmt.Sprintf("finished after %d checkpoints; mv equals upstream", len(res.Records))
}

func printRecords(recs []backfill.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "barrier %d epoch %d step %d truth %.2f%%%s\n", r.Barrier, r.Epoch, r.Step, r.Truth, map[bool]string{true: " finished"}[r.Finished])
		for _, v := range r.Vnodes {
			fmt.Fprintf(&b, "  v%d %s\n", v.Vnode, stateString(v))
		}
		for _, f := range r.Figures {
			fmt.Fprintf(&b, "  %-8s raw %6.2f%% (%.0f/%.0f) shown %s\n", f.Approach, f.Raw, f.Consumed, f.Total, f.Shown)
		}
	}
	if b.Len() == 0 {
		return "no checkpoint\n"
	}
	return b.String()
}

func printPhaseRecords(recs []backfill.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "barrier %d step %d %s: log consumed %d pending %d, truth %.2f%%%s\n", r.Barrier, r.Step, r.Phase,
			r.LogConsumed, r.LogPending, r.Truth, map[bool]string{true: " finished"}[r.Finished])
		for _, v := range r.Vnodes {
			if r.Phase == "snapshot" { // the vnodes are all finished after
				fmt.Fprintf(&b, "  v%d %s\n", v.Vnode, stateString(v))
			}
		}
		for _, f := range r.Figures {
			fmt.Fprintf(&b, "  %-8s raw %6.2f%% (%.0f/%.0f) shown %s\n", f.Approach, f.Raw, f.Consumed, f.Total, f.Shown)
		}
	}
	if b.Len() == 0 {
		return "no checkpoint\n"
	}
	return b.String()
}

func stateString(v backfill.VnodeState) string {
	cursor := "-"
	if v.Cursor != nil {
		_, rest, _ := keys.DecodeUint64(v.Cursor)
		id, _, _ := keys.DecodeUint64(rest)
		cursor = "id=" + strconv.FormatUint(id, 10)
	}
	switch {
	case v.Finished:
		return fmt.Sprintf("finished rows=%d", v.RowCount)
	case v.Cursor == nil:
		return "not started"
	default:
		return fmt.Sprintf("cursor %s rows=%d", cursor, v.RowCount)
	}
}

func intArg(td *datadriven.TestData, key string, def int) int {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			v, err := strconv.Atoi(a.Vals[0])
			if err != nil {
				panic(err)
			}
			return v
		}
	}
	return def
}

func strArg(td *datadriven.TestData, key, def string) string {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			return a.Vals[0]
		}
	}
	return def
}
