package backfill_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

const userChildDirEnv = "LSMSTATS_BACKFILL_USER_CHILD_DIR"

// userCrashSource is the upstream of TestUserTableCrash: 20 inserts per
// step and checked updates and deletes of earlier steps' rows, for as long
// as the job runs. It prints the step it resumes at ("S k") and each step
// it produces ("P k").
type userCrashSource struct{ userSource }

func (s *userCrashSource) Resume(at backfill.Position) error {
	fmt.Printf("S %d\n", at.Step)
	return s.userSource.Resume(at)
}

func (s *userCrashSource) Next(ctx context.Context) ([]backfill.RowOp, error) {
	ops, err := s.userSource.Next(ctx)
	fmt.Printf("P %d\n", s.step)
	return ops, err
}

// userCrashJob is the configuration of TestUserTableCrash's job.
func userCrashJob(s *lsm.Store, src backfill.Source) backfill.JobConfig {
	return backfill.JobConfig{Store: s, Upstream: userTable(1), MV: 2, State: 3, Meta: 4,
		Actors: 2, ChunkSize: 16, BarrierRows: 20, CheckpointEvery: 2, Source: src,
		Score: backfilltest.Oracles(backfilltest.ScanOracle{Store: s, Table: 1})}
}

func newUserCrashSource() *userCrashSource {
	return &userCrashSource{userSource{def: userTable(1), rows: 20, last: 1 << 20}}
}

// recordLine prints a record for the parent: "R barrier step finished
// approach=pct...", or "I ..." for the figure recovered at open.
func recordLine(kind string, r backfill.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d %d %t", kind, r.Barrier, r.Step, r.Finished)
	for _, f := range r.Figures {
		fmt.Fprintf(&b, " %s=%s", f.Approach, strconv.FormatFloat(f.Pct, 'g', -1, 64))
	}
	return b.String()
}

func parseRecordLine(t *testing.T, l string) backfill.Record {
	f := strings.Fields(l)
	barrier, err := strconv.ParseUint(f[1], 10, 64)
	require.NoError(t, err, l)
	step, err := strconv.ParseUint(f[2], 10, 64)
	require.NoError(t, err, l)
	finished, err := strconv.ParseBool(f[3])
	require.NoError(t, err, l)
	r := backfill.Record{Barrier: barrier, Step: step, Finished: finished}
	for _, kv := range f[4:] {
		name, v, _ := strings.Cut(kv, "=")
		pct, err := strconv.ParseFloat(v, 64)
		require.NoError(t, err, l)
		r.Figures = append(r.Figures, backfill.Figure{Approach: name, Pct: pct})
	}
	return r
}

// userCrashChild runs the job of TestUserTableCrash until it finishes or is
// killed.
func userCrashChild(dir string) error {
	return runJobChild(dir, recordLine, func(s *lsm.Store) (backfill.JobConfig, error) {
		return userCrashJob(s, newUserCrashSource()), nil
	})
}

// addChildLines adds the records a crash test's child printed ("R", "I";
// parse reads one) to display, fails the test on the child's "E" line, and
// reports whether the child printed "D": its job finished.
func addChildLines(t *testing.T, display *backfilltest.Display, run int, lines []string, parse func(string) backfill.Record) (finished bool) {
	t.Helper()
	for _, l := range lines {
		switch l[0] {
		case 'E':
			t.Fatalf("child failed: %s", l)
		case 'R', 'I':
			require.NoError(t, display.Add(parse(l)), "run %d: %s", run, l)
		case 'D':
			finished = true
		}
	}
	return finished
}

// runJobChild is the body of a crash test's child process: it opens the
// store in dir and runs the job (configured by config) with a
// backfill.Driver to its end, printing every record the driver delivers,
// as line formats them: the figure recovered at open ("I": Reopened) and
// each checkpoint's ("R"), and "D" once the job finished.
func runJobChild(dir string, line func(kind string, r backfill.Record) string,
	config func(s *lsm.Store) (backfill.JobConfig, error)) error {
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil), MemoryWatermark: 256 << 10})
	if err != nil {
		return err
	}
	d := backfill.Driver{
		Open: func(backfill.Opening) (backfill.JobConfig, error) { return config(s) },
		OnCheckpoint: func(r backfill.Record) {
			kind := "R"
			if r.Reopened {
				kind = "I"
			}
			fmt.Println(line(kind, r))
		},
	}
	if _, err := d.Run(context.Background()); err != nil {
		_ = s.Close()
		return err
	}
	fmt.Println("D")
	return s.Close()
}

// TestUserTableCrash is acceptance 1 of issue 15: a backfill over a user's
// table (pk (bytes, u64)), loaded by the test's own writer, whose upstream
// the test's source keeps writing during the job (inserts and checked
// updates and deletes). A child process running the job is killed with
// SIGKILL at random moments, at least 5 times, and restarted. Each restart
// resumes the source at the job's committed step (never at 0 once a step
// is committed, never past what the killed run produced) and the source
// produces the steps after it only. The display rules hold over the
// records of every run; at the end the MV equals the upstream table, and
// the upstream table is exactly the load plus the source's steps up to the
// committed one, each applied once.
func TestUserTableCrash(t *testing.T) {
	seed := testSeed(t)
	r := rand.New(rand.NewPCG(seed, 15))
	kills := max(5, *crashesFlag/2)
	dir := t.TempDir()

	// The test's own writer loads the table.
	s, err := lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	def := userTable(1)
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	want := map[string]string{}
	for i := range uint64(2500) {
		pk := namePK(fmt.Sprintf("load%d", i%11), i)
		row := fmt.Sprintf("loaded %d", i)
		require.NoError(t, w.Insert(1, def.VnodeOf(pk), pk, []byte(row)))
		want[string(pk)] = row
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())

	var display backfilltest.Display
	killed, committed := 0, uint64(0) // committed: the step of the last checkpoint seen
	var produced uint64               // the last step the previous run produced
	for run := 0; ; run++ {
		require.Less(t, run, 100, "the job does not finish")
		kill := killed < kills
		c := testutil.StartChild(t, os.Stderr, userChildDirEnv+"="+dir)
		var lines []string
		target := 1 + r.IntN(3)
		handle := func(l string) bool {
			lines = append(lines, l)
			if l[0] == 'R' {
				target--
			}
			return kill && target == 0 || l[0] == 'D' || l[0] == 'E'
		}
		c.ReadUntil(time.Minute, handle)
		if kill {
			c.KillAfter(t, time.Duration(r.IntN(20000))*time.Microsecond, func(l string) { handle(l) })
		}
		end := c.Wait()
		finished := false
		resumed, first := int64(-1), int64(-1)
		var last, checkpoint uint64
		for _, l := range lines {
			f := strings.Fields(l)
			switch f[0] {
			case "E":
				t.Fatalf("child failed: %s", l)
			case "S":
				k, err := strconv.ParseUint(f[1], 10, 64)
				require.NoError(t, err)
				resumed = int64(k)
			case "P":
				k, err := strconv.ParseUint(f[1], 10, 64)
				require.NoError(t, err)
				if first < 0 {
					first = int64(k)
				}
				last = k
			case "R", "I":
				rec := parseRecordLine(t, l)
				require.NoError(t, display.Add(rec), "run %d: %s", run, l)
				if f[0] == "R" {
					checkpoint = max(checkpoint, rec.Step)
				}
			case "D":
				finished = true
			}
		}
		require.GreaterOrEqual(t, resumed, int64(0), "run %d never resumed its source", run)
		// Resumed at the committed step: at or after the last checkpoint
		// the previous run reported (its kill may have landed after a
		// commit and before the report), never past what it produced.
		require.GreaterOrEqual(t, uint64(resumed), committed, "run %d resumed before the committed step", run)
		require.LessOrEqual(t, uint64(resumed), produced, "run %d resumed past the steps produced", run)
		if first >= 0 {
			require.Equal(t, resumed+1, first, "run %d: the source did not continue from its resume step", run)
		}
		t.Logf("run %d: resumed at step %d, produced steps %d..%d, last checkpoint at step %d, finished %t",
			run, resumed, first, last, checkpoint, finished)
		committed = max(committed, checkpoint)
		if last > 0 {
			produced = last
		}
		if finished {
			require.NoError(t, end.Finished())
			break
		}
		require.True(t, end.Killed, "run %d ended without finishing: %+v", run, end)
		killed++
		if run > 0 {
			require.Positive(t, resumed, "run %d resumed at step 0 after a committed checkpoint", run)
		}
	}
	require.NoError(t, display.Done())
	require.GreaterOrEqual(t, killed, kills)

	// The final state: the MV equals the upstream, and the upstream is the
	// load plus the source's steps up to the committed one.
	s, err = lsm.Open(dir, &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer s.Close()
	src := &newUserCrashSource().userSource // silent
	j, err := backfill.OpenJob(userCrashJob(s, src))
	require.NoError(t, err)
	require.NoError(t, j.Compare())
	require.True(t, j.Finished())
	step := src.step
	model := &userSource{def: def, rows: src.rows, last: src.last}
	for model.step < step {
		ops, err := model.Next(context.Background())
		require.NoError(t, err)
		for _, op := range ops {
			_, live := want[string(op.PK)]
			switch op.Kind {
			case backfill.Insert:
				require.False(t, live)
				want[string(op.PK)] = string(op.Row)
			case backfill.CheckedUpdate:
				require.True(t, live)
				want[string(op.PK)] = string(op.Row)
			case backfill.CheckedDelete:
				require.True(t, live)
				delete(want, string(op.PK))
			}
		}
	}
	got := 0
	for v := range def.VnodeCount {
		it, err := s.NewIter(1, uint16(v), nil, nil)
		require.NoError(t, err)
		for ok := it.First(); ok; ok = it.Next() {
			require.Equal(t, want[string(it.PK())], string(it.Row()), "pk %x", it.PK())
			got++
		}
		require.NoError(t, it.Close())
	}
	require.Equal(t, len(want), got)
	require.NoError(t, j.Close())
	t.Logf("%d kills, committed step %d, %d rows", killed, step, got)
}

func namePK(name string, id uint64) []byte {
	return keys.AppendUint64(keys.AppendBytes(nil, []byte(name)), id)
}
