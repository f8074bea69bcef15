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
	"github.com/lsmstats/lsmstats/internal/quietlog"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestDataDriven runs backfill/testdata/jobs/*: a small job, barrier by barrier.
//
//	job workload=NAME rows=N vnodes=N actors=N barrier-rows=N chunk-size=N
//	    [seed=N] [checkpoint-every=N] [during-steps=N]
//	                   open the store and the job (load phase included)
//	steps n=N          run N source steps; print each checkpoint: cursors,
//	                   state, truth and both approaches' raw and shown figures
//	crash              drop the job and store without closing (uncommitted
//	                   work is lost as in a kill)
//	restart [actors=N] reopen; print the figure shown before the first barrier
//	finish             run to the end; print the last checkpoint and whether
//	                   the MV equals the upstream table
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/jobs", func(t *testing.T, path string) {
		var (
			dir  = t.TempDir()
			s    *lsm.Store
			j    *backfill.Job
			cfg  backfill.JobConfig
			p    workload.Params
			recs []backfill.Record
		)
		closeAll := func() {
			if j != nil {
				require.NoError(t, j.Close())
			}
			if s != nil {
				require.NoError(t, s.Close())
			}
			j, s = nil, nil
		}
		defer closeAll()
		open := func(actors int) {
			var err error
			s, err = lsm.Open(dir, &lsm.Options{Logger: quietlog.Logger{}})
			require.NoError(t, err)
			g, err := workload.New(p)
			require.NoError(t, err)
			cfg.Store, cfg.Actors = s, actors
			cfg.Source, cfg.Score = genjob.Source{G: g}, backfilltest.Oracles(genjob.Oracle{G: g})
			cfg.OnCheckpoint = func(r backfill.Record) { recs = append(recs, r) }
			j, err = backfill.OpenJob(cfg)
			require.NoError(t, err)
		}
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			recs = nil
			switch td.Cmd {
			case "job":
				var err error
				p, err = workload.Preset(strArg(td, "workload", "uniform"), intArg(td, "rows", 40), intArg(td, "vnodes", 4), uint64(intArg(td, "seed", 1)))
				require.NoError(t, err)
				p.BatchRows = p.Rows
				p.DuringSteps = intArg(td, "during-steps", 4)
				cfg = backfill.JobConfig{Upstream: p.TableDef(1), MV: 2, State: 3, Meta: 4,
					ChunkSize: intArg(td, "chunk-size", 2), BarrierRows: intArg(td, "barrier-rows", 3),
					CheckpointEvery: intArg(td, "checkpoint-every", 1)}
				open(intArg(td, "actors", 1))
				return fmt.Sprintf("backfill starts at step %d", cfg.Source.BackfillStep())
			case "steps":
				for range intArg(td, "n", 1) {
					_, _, err := j.Step(context.Background())
					require.NoError(t, err)
				}
				return printRecords(recs)
			case "crash":
				// No Close: writers' uncommitted epochs are simply lost. The
				// store is closed so that it can be reopened in-process.
				require.NoError(t, s.Close())
				j, s = nil, nil
				return "crashed"
			case "restart":
				if j != nil || s != nil {
					closeAll()
				}
				open(intArg(td, "actors", cfg.Actors))
				if r := j.Initial(); r != nil {
					return "before the first barrier:\n" + printRecords([]backfill.Record{*r})
				}
				return "not started"
			case "finish":
				res, err := j.Run(context.Background())
				require.NoError(t, err)
				last := res.Records[len(res.Records)-1]
				out := printRecords([]backfill.Record{last})
				if err := j.Compare(); err != nil {
					return out + "mv: " + err.Error()
				}
				return out + fmt.Sprintf("finished after %d checkpoints; mv equals upstream", len(res.Records))
			default:
				t.Fatalf("unknown command %s", td.Cmd)
				return ""
			}
		})
	})
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
