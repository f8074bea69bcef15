package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain lets the test binary serve as the backfill worker: the
// supervisor re-executes os.Executable() with "backfill --worker ...".
// Otherwise it runs the tests and fails if any goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(fatalChildEnv) != "" {
		cliLogger{w: os.Stderr}.Fatalf("MANIFEST sync failed: %s", "injected")
	}
	if len(os.Args) > 2 && (os.Args[1] == "backfill" || os.Args[1] == "node") {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	// The object-store tests share one S3 server, stopped at the end.
	goleak.VerifyTestMain(s3server.TestingM(m))
}

func runCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestBackfillCommand runs the main job with a crash and a rescale, and
// checks the JSON report against what the progress lines showed, the SIGKILL,
// the plot, and then `stats` and `verify` on the store it left behind.
func TestBackfillCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	plotPath := filepath.Join(t.TempDir(), "run.png")
	out, errOut, code := runCmd(t, "backfill", "--workload", "delete-churn", "--rows", "30000", "--vnodes", "32",
		"--actors", "2", "--seed", "9", "--delete-order", "prefix", "--insert-during", "0.1",
		"--chunk-size", "64", "--barrier-rows", "512", "--crash-at", "4", "--crash-at", "8", "--rescale-to", "3",
		"--snapshot-order", "interleaved", "--dir", dir, "--json", jsonPath, "--plot", plotPath, "--bars", "off")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)

	var rep report
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.True(t, rep.MVMatches)
	require.Equal(t, 2, rep.Crashes)
	require.Equal(t, []string{"killed", "killed"}, rep.KilledBy, "--crash-at must kill with SIGKILL")
	require.Len(t, rep.Recoveries, 2)
	require.Contains(t, out, "2 crashes (2 recoveries showed a figure before the first barrier after it)")
	require.Equal(t, "prefix", rep.Parameters["delete_order"])
	require.Equal(t, "interleaved", rep.Parameters["snapshot_order"])
	require.Equal(t, 0.1, rep.Parameters["insert_during"])
	require.EqualValues(t, 30000, rep.Parameters["rows"])
	require.EqualValues(t, 3, rep.Parameters["rescale_to"])
	require.NotZero(t, rep.CommittedEpoch)
	require.Contains(t, rep.Error, "stats")
	require.Contains(t, rep.Error, "rowcount")
	require.Less(t, rep.Error["stats"].MaxPP, rep.Error["rowcount"].MaxPP)
	// The workers' records carry the progress times bench measured.
	require.Positive(t, rep.Cost["stats"].ProgressNSPerBarrier)
	require.Positive(t, rep.Cost["stats"].StateBytesPerBarrier)
	last := rep.Barriers[len(rep.Barriers)-1]
	require.True(t, last.Finished)
	require.True(t, strings.HasPrefix(last.DisplayedStats, "100.00% ("), last.DisplayedStats)
	// Every progress line printed shows exactly what the JSON holds.
	shown := map[string]barrierJSON{}
	for _, b := range rep.Barriers {
		shown["barrier "+itoa(b.Barrier)] = b
	}
	lines := 0
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "barrier ") {
			continue
		}
		key := l[:strings.Index(l, ":")]
		b, ok := shown[key]
		require.True(t, ok, "line %q has no barrier in the JSON", l)
		require.Contains(t, l, "rowcount "+b.DisplayedRowCount)
		require.Contains(t, l, "stats "+b.DisplayedStats)
		lines++
	}
	require.Positive(t, lines)
	// Displayed figures never decrease, across the crashes too.
	var prevRC, prevST string
	for _, b := range rep.Barriers {
		require.GreaterOrEqual(t, pct(b.DisplayedRowCount), pct(prevRC))
		require.GreaterOrEqual(t, pct(b.DisplayedStats), pct(prevST))
		prevRC, prevST = b.DisplayedRowCount, b.DisplayedStats
	}
	st, err := os.Stat(plotPath)
	require.NoError(t, err)
	require.Greater(t, st.Size(), int64(1000))

	// stats --json agrees with an independent scan of the store.
	sout, serr, code := runCmd(t, "stats", "--dir", dir, "--json")
	require.Equal(t, 0, code, serr)
	var sj statsJSON
	require.NoError(t, json.Unmarshal([]byte(sout), &sj))
	require.Equal(t, rep.CommittedEpoch, sj.CommittedEpoch)
	s, err := openStore(dir, "", io.Discard, false)
	require.NoError(t, err)
	for _, table := range sj.Tables {
		byVnode := map[uint16]vnodeStatJSON{}
		for _, v := range table.Vnodes {
			byVnode[v.Vnode] = v
		}
		var total int64
		for v := 0; v < table.VnodeCount; v++ {
			it, err := s.NewIter(table.TableID, uint16(v), nil, nil)
			require.NoError(t, err)
			var rows, byts int64
			for ok := it.First(); ok; ok = it.Next() {
				rows++
				byts += int64(len(it.PK()) + len(it.Row()))
			}
			require.NoError(t, it.Close())
			// A vnode left out has no rows; one shown has its live counts.
			var liveRows, liveBytes int64
			if vs, ok := byVnode[uint16(v)]; ok {
				require.NotNil(t, vs.LiveRows, "table %d vnode %d", table.TableID, v)
				require.NotNil(t, vs.LiveBytes, "table %d vnode %d", table.TableID, v)
				liveRows, liveBytes = *vs.LiveRows, *vs.LiveBytes
			}
			require.Equal(t, rows, liveRows, "table %d vnode %d", table.TableID, v)
			if rows > 0 {
				require.NotNil(t, byVnode[uint16(v)].Entries, "physical statistics shown")
				require.GreaterOrEqual(t, *byVnode[uint16(v)].Entries, uint64(rows))
			}
			require.Equal(t, byts, liveBytes, "table %d vnode %d", table.TableID, v)
			total += rows
		}
		require.NotNil(t, table.Live.Rows)
		require.Equal(t, total, *table.Live.Rows)
		require.NotNil(t, table.Physical)
		if table.TableID == bench.UpstreamTable {
			require.Greater(t, table.Physical.TotalKeyCount, uint64(total), "churn leaves more entries than rows")
		}
	}
	require.NoError(t, s.Close())
	tout, _, code := runCmd(t, "stats", "--dir", dir, "--table", "1")
	require.Equal(t, 0, code)
	require.Contains(t, tout, "total_key_count")
	_, terr, code := runCmd(t, "stats", "--dir", dir, "--table", "77")
	require.Equal(t, 1, code)
	require.Contains(t, terr, "unknown table")

	// verify passes on the store the run left behind.
	vout, _, code := runCmd(t, "verify", "--dir", dir)
	require.Equal(t, 0, code, vout)
	require.Contains(t, vout, ": ok")
}

// checkLSMFigures checks the LSM's figures of a report with one crash:
// every barrier has them; within a worker run (the barriers up to the
// recovered one, then those after it) the counts and times of finished
// flushes and compactions never fall; and the reopened worker shows the
// flush of the WAL it replayed, an L0 file.
func checkLSMFigures(t *testing.T, rep *report) {
	t.Helper()
	require.Len(t, rep.Recoveries, 1)
	recovered := rep.Recoveries[0].Barrier
	var prev *lsmJSON
	var prevBarrier uint64
	reopenedL0, reopenedFlushS, reopenedWritten := int32(0), 0.0, int64(0)
	for _, b := range rep.Barriers {
		l := b.LSM
		require.NotNil(t, l, "barrier %d: the LSM's figures", b.Barrier)
		require.GreaterOrEqual(t, l.L0Sublevels, int32(0), "barrier %d", b.Barrier)
		require.GreaterOrEqual(t, l.Flushing, int64(0), "barrier %d", b.Barrier)
		require.GreaterOrEqual(t, l.Compacting, int64(0), "barrier %d", b.Barrier)
		if prev != nil && (b.Barrier <= recovered) == (prevBarrier <= recovered) {
			require.GreaterOrEqual(t, l.Flushes, prev.Flushes, "barrier %d: flushes within a run", b.Barrier)
			require.GreaterOrEqual(t, l.FlushS, prev.FlushS, "barrier %d", b.Barrier)
			require.GreaterOrEqual(t, l.Compactions, prev.Compactions, "barrier %d: compactions within a run", b.Barrier)
			require.GreaterOrEqual(t, l.CompactionS, prev.CompactionS, "barrier %d", b.Barrier)
			require.Greater(t, l.WrittenBytes, prev.WrittenBytes, "barrier %d: each checkpoint writes", b.Barrier)
			require.GreaterOrEqual(t, l.BusyS, prev.BusyS, "barrier %d", b.Barrier)
		}
		// Busy counts each finished flush's and compaction's time once,
		// however they overlapped (from their begin events: Pebble's own
		// times start a little earlier).
		require.GreaterOrEqual(t, l.BusyS, 0.9*max(l.FlushS, l.CompactionS)-0.01, "barrier %d: busy", b.Barrier)
		if b.Barrier > recovered {
			reopenedL0, reopenedFlushS = max(reopenedL0, l.L0Sublevels), max(reopenedFlushS, l.FlushS)
			reopenedWritten = max(reopenedWritten, l.WrittenBytes)
		}
		prev, prevBarrier = l, b.Barrier
	}
	require.Positive(t, reopenedL0, "the reopened worker's L0: the replayed WAL's flush")
	require.Positive(t, reopenedFlushS, "the reopened worker's flush time")
	require.Positive(t, reopenedWritten, "the reopened worker's replayed WAL")
}

// TestBackfillNoTruth runs the same job with a crash with and without
// --no-truth. Without the truth, the JSON report holds every barrier's
// figures, bounds and ETA, its truth null, the "truth" parameter false, no
// error statistics and no truth's time, and the progress lines show no
// truth. With it, the truth of every barrier is there (computed beside the
// job, it comes after its checkpoint's line), and the summary says how
// long it took. Both report the job's own rows/s.
func TestBackfillNoTruth(t *testing.T) {
	for _, noTruth := range []bool{true, false} {
		jsonPath := filepath.Join(t.TempDir(), "run.json")
		args := []string{"backfill", "--workload", "mixed", "--rows", "20000", "--vnodes", "16", "--actors", "2",
			"--chunk-size", "64", "--barrier-rows", "256", "--crash-at", "8", "--json", jsonPath, "--bars", "off"}
		if noTruth {
			args = append(args, "--no-truth")
		}
		out, errOut, code := runCmd(t, args...)
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		b, err := os.ReadFile(jsonPath)
		require.NoError(t, err)
		var rep report
		require.NoError(t, json.Unmarshal(b, &rep))
		var raw struct {
			Barriers   []map[string]json.RawMessage `json:"barriers"`
			Recoveries []map[string]json.RawMessage `json:"recoveries"`
			Error      json.RawMessage              `json:"error"`
			Timings    map[string]json.RawMessage   `json:"timings"`
		}
		require.NoError(t, json.Unmarshal(b, &raw))
		require.True(t, rep.MVMatches)
		require.Equal(t, 1, rep.Crashes)
		require.Equal(t, !noTruth, rep.Parameters["truth"])
		require.Positive(t, rep.Timings.JobBackfillS)
		require.Positive(t, rep.Timings.JobRowsPerS)
		require.Positive(t, rep.Timings.DowntimeS)
		require.Contains(t, out, "the job's backfill ran ")
		require.Len(t, raw.Barriers, len(rep.Barriers))
		withETA := 0
		for i, b := range rep.Barriers {
			require.NotEmpty(t, b.DisplayedStats, "barrier %d", b.Barrier)
			require.NotEmpty(t, b.DisplayedRowCount, "barrier %d", b.Barrier)
			require.NotNil(t, b.StatsBounds, "barrier %d", b.Barrier)
			if b.ETA.RemainingS >= 0 {
				withETA++
			}
			// The figures are there with or without the truth.
			require.Positive(t, b.SnapshotRows, "barrier %d", b.Barrier)
			require.Positive(t, b.Stats, "barrier %d: the stats figure", b.Barrier)
			require.Positive(t, b.RowCount, "barrier %d: the row-count figure", b.Barrier)
			require.Len(t, b.Upstreams, 1, "barrier %d", b.Barrier)
			require.Len(t, b.Upstreams[0].Figures, 2, "barrier %d: both approaches' figures", b.Barrier)
			if noTruth {
				require.Nil(t, b.Truth, "barrier %d", b.Barrier)
				require.Nil(t, b.VnodeErrMeanPP, "barrier %d", b.Barrier)
				require.Nil(t, b.Upstreams[0].Truth, "barrier %d", b.Barrier)
				for _, k := range []string{"truth", "vnode_err_mean_pp", "vnode_err_max_pp"} {
					require.Equal(t, "null", string(raw.Barriers[i][k]), "barrier %d: %s", b.Barrier, k)
				}
				var ups []map[string]json.RawMessage
				require.NoError(t, json.Unmarshal(raw.Barriers[i]["upstreams"], &ups))
				require.Equal(t, "null", string(ups[0]["truth"]), "barrier %d: the upstream's truth", b.Barrier)
			} else {
				require.NotNil(t, b.Truth, "barrier %d", b.Barrier)
				require.NotNil(t, b.VnodeErrMeanPP, "barrier %d", b.Barrier)
				require.NotNil(t, b.VnodeErrMaxPP, "barrier %d", b.Barrier)
				require.NotNil(t, b.Upstreams[0].Truth, "barrier %d", b.Barrier)
				require.InDelta(t, *b.Truth, *b.Upstreams[0].Truth, 1e-9, "barrier %d", b.Barrier)
			}
		}
		if noTruth {
			for _, r := range raw.Recoveries {
				require.Equal(t, "null", string(r["truth"]), "a recovery")
			}
			require.Equal(t, "null", string(raw.Error))
			require.Equal(t, "null", string(raw.Timings["truth"]))
		}
		require.Positive(t, withETA)
		require.Positive(t, rep.ETA.N, "the ETA's accuracy, on the stats figure without a truth")
		checkLSMFigures(t, &rep)
		last := rep.Barriers[len(rep.Barriers)-1]
		require.True(t, last.Finished)
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "barrier ") && noTruth {
				require.NotContains(t, l, "truth", "a progress line")
			}
		}
		if noTruth {
			require.Nil(t, rep.Error)
			require.Nil(t, rep.Timings.Truth)
			require.Contains(t, out, "truth: none (--no-truth)")
			require.Positive(t, rep.Cost["stats"].ProgressNSPerBarrier, "the figures' costs are still there")
			continue
		}
		require.Contains(t, rep.Error, "stats")
		require.Equal(t, len(rep.Barriers), rep.Error["stats"].N)
		require.NotNil(t, rep.Timings.Truth)
		require.Positive(t, rep.Timings.Truth.WallS)
		require.Positive(t, rep.Timings.Truth.CPUS)
		// Every barrier and the recovered job's first figure; a killed
		// worker's truths still in the pipe are read.
		require.GreaterOrEqual(t, rep.Timings.Truth.Checkpoints, len(rep.Barriers)+len(rep.Recoveries))
		for _, r := range rep.Recoveries {
			require.NotNil(t, r.Truth, "the recovered job's first figure, barrier %d", r.Barrier)
		}
		require.Contains(t, out, "truth: computed beside the job")
	}
}

// TestBackfillResumedDir runs a job in a --dir to its end, then the same
// command again: the second finds the job done, reads no snapshot rows,
// and says so instead of dividing the first run's rows by its own time.
func TestBackfillResumedDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	run := func() (report, string) {
		jsonPath := filepath.Join(t.TempDir(), "run.json")
		out, errOut, code := runCmd(t, "backfill", "--workload", "uniform", "--rows", "20000", "--vnodes", "16",
			"--barrier-rows", "512", "--dir", dir, "--no-truth", "--json", jsonPath, "--bars", "off")
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		b, err := os.ReadFile(jsonPath)
		require.NoError(t, err)
		var rep report
		require.NoError(t, json.Unmarshal(b, &rep))
		require.True(t, rep.MVMatches)
		return rep, out
	}
	first, out := run()
	require.Zero(t, first.Timings.RowsBefore)
	require.Positive(t, first.Timings.JobRowsPerS)
	require.NotContains(t, out, "the job resumed from --dir")
	read := first.Barriers[len(first.Barriers)-1].SnapshotRows
	require.Positive(t, read)

	second, out := run()
	require.Equal(t, read, second.Timings.RowsBefore)
	require.Zero(t, second.Timings.JobRowsPerS)
	require.Zero(t, second.Timings.RowsPerS)
	require.Contains(t, out, fmt.Sprintf("the job resumed from --dir with %s snapshot rows read by an earlier command", thousands(float64(read))))
}

// TestBackfillSnapshotUpstreams runs a snapshot backfill over three
// upstream tables through the command, with a crash: the JSON report holds
// each barrier's phase and each table's figures and truth, the phases come
// in order, the stats figure is shown finished only once joined, and the
// MVs equal their tables.
func TestBackfillSnapshotUpstreams(t *testing.T) {
	jsonPath := filepath.Join(t.TempDir(), "run.json")
	out, errOut, code := runCmd(t, "backfill", "--mode", "snapshot", "--upstreams", "3", "--rows", "8000,1000,300",
		"--workload", "mixed", "--vnodes", "8", "--barrier-rows", "256", "--update-during", "0.4",
		"--crash-at", "6", "--json", jsonPath, "--bars", "off")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	var rep struct {
		Parameters map[string]any `json:"parameters"`
		MVMatches  bool           `json:"mv_matches_upstream"`
		Crashes    int            `json:"crashes"`
		Barriers   []barrierJSON  `json:"barriers"`
	}
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.True(t, rep.MVMatches)
	require.Equal(t, 1, rep.Crashes)
	require.Equal(t, "snapshot", rep.Parameters["mode"])
	require.Equal(t, []any{8000.0, 1000.0, 300.0}, rep.Parameters["upstream_rows"])
	require.Contains(t, out, "[snapshot: log ")
	require.Contains(t, out, "[joined: log ")
	require.Contains(t, out, "[tables: ")
	// Lines without bars come at most once a second, so a short log-store
	// phase may print none: the JSON below holds every barrier's phase,
	// and TestPerUpstreamPhase the line's text for it.
	var phases []string
	for _, b := range rep.Barriers {
		if len(phases) == 0 || phases[len(phases)-1] != b.Phase {
			phases = append(phases, b.Phase)
		}
		require.Equal(t, b.Phase == "joined", b.Finished, "barrier %d", b.Barrier)
		require.Len(t, b.Upstreams, 3)
	}
	require.Equal(t, []string{"snapshot", "log store", "joined"}, phases)
}

// TestPerUpstreamPhase: a line shows a snapshot backfill's phase with its
// log rows, and each upstream table's stats figure for a job over several.
func TestPerUpstreamPhase(t *testing.T) {
	r := &recordJSON{Phase: "log store", LogConsumed: 1200, LogPending: 800}
	require.Equal(t, "  [log store: log 1,200 consumed, 800 pending]", perUpstream(r))
	r.Upstreams = []backfill.UpstreamProgress{
		{Figures: []backfill.Figure{{Approach: "stats", Pct: 41.2}}},
		{Figures: []backfill.Figure{{Approach: "stats", Pct: 100}}},
	}
	require.Equal(t, "  [log store: log 1,200 consumed, 800 pending]  [tables: 41.20% 100.00%]", perUpstream(r))
	require.Empty(t, perUpstream(&recordJSON{}))
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"backfill", "--workload", "nope", "--bars", "off"},
		{"backfill", "--delete-order", "middle", "--rows", "10", "--bars", "off"},
		{"backfill", "--actors", "0", "--bars", "off"},
		{"backfill", "--mode", "both", "--bars", "off"},
		{"backfill", "--snapshot-order", "random", "--bars", "off"},
		{"backfill", "--upstreams", "2", "--rows", "1,2,3", "--bars", "off"},
		{"backfill", "--rows", "10,x", "--bars", "off"},
		{"backfill", "--upstreams", "-1", "--bars", "off"},
		{"backfill", "--stats-bucket-budget", "-5", "--bars", "off"},
		{"backfill", "stray"},
		{"stats"},
		{"stats", "--dir", "x", "stray"},
		{"stats", "--nope"},
		{"verify"},
		{"verify", "--dir", "x", "stray"},
		{"frobnicate"},
		{},
	} {
		_, errOut, code := runCmd(t, args...)
		require.Equal(t, exitUsage, code, "%v", args)
		require.NotEmpty(t, errOut, "%v", args)
	}
	// Refused before a worker starts, naming the flag: --vnodes 0 used to
	// pass for the default, and the others failed in the worker, whose
	// error the supervisor said again.
	for args, want := range map[string]string{
		"--vnodes 0":                             "--vnodes 0: want 1 to 32768",
		"--vnodes 40000":                         "--vnodes 40000: want 1 to 32768",
		"--vnodes 1":                             "--actors 2 is more than --vnodes 1",
		"--vnodes 2 --rescale-to 3 --crash-at 1": "--rescale-to 3 is more than --vnodes 2",
		"--workload skew --pk-shape timeseries":  "zipf applies to the hashed pk shape, not timeseries",
		"--delete-frac 0.7 --delete-during 0.5":  "delete more than every row",
	} {
		_, errOut, code := runCmd(t, append([]string{"backfill", "--bars", "off"}, strings.Fields(args)...)...)
		require.Equal(t, exitUsage, code, args)
		require.Contains(t, errOut, want, args)
	}
}

func itoa(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func pct(shown string) float64 {
	if shown == "" {
		return 0
	}
	var p float64
	_, _ = fmtSscan(shown, &p)
	return p
}

func fmtSscan(s string, p *float64) (int, error) { return fmt.Sscanf(s, "%f%%", p) }

// TestVerifyRecomputeLive: a store whose unchecked writer lied (updates
// that state a wrong old row) fails verify; verify --recompute-live rescans
// the flagged table, persists exact counts and passes, and a plain verify
// passes after. (A lie about a row count, such as an insert of a live pk,
// makes its bucket too big in these one-row vnodes, and the bucket's split
// scan corrects it at once.)
func TestVerifyRecomputeLive(t *testing.T) {
	dir := t.TempDir()
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(io.Discard)})
	require.NoError(t, err)
	def := lsm.TableDef{ID: 5, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(5, nil, &lsm.WriterOptions{Unchecked: true})
	require.NoError(t, err)
	for epoch, pks := range [][]uint64{{1, 2, 3, 4}, {2, 3}} { // the second updates with a wrong old row
		for _, pk := range pks {
			key := keys.AppendUint64(nil, pk)
			if epoch == 0 {
				require.NoError(t, w.Insert(uint64(epoch+1), def.VnodeOf(key), key, []byte("row")))
			} else {
				require.NoError(t, w.Update(uint64(epoch+1), def.VnodeOf(key), key, []byte("not-the-old-row"), []byte("row")))
			}
		}
		require.NoError(t, w.Seal(uint64(epoch+1)))
		require.NoError(t, s.Commit(uint64(epoch+1)))
	}
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())

	out, errOut, code := runCmd(t, "verify", "--dir", dir)
	require.Equal(t, exitDifferences, code, out)
	require.Contains(t, out, "DIFFERENCE")
	require.Contains(t, errOut, "lsmstats verify: 2 differences between the statistics and their recomputation")
	require.Contains(t, out, "may contain estimates")

	out, _, code = runCmd(t, "verify", "--dir", dir, "--recompute-live")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "recomputed live statistics of table 5: 4 rows / 20 bytes -> 4 rows / 44 bytes")
	require.NotContains(t, out, "may contain estimates")

	out, _, code = runCmd(t, "verify", "--dir", dir)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, ": ok")
}
