package main

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lsmstats/lsmstats/bench"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// fatalChildEnv makes the test binary call the CLI's logger's Fatalf, as
// Pebble does on a failed WAL or MANIFEST write (TestMain).
const fatalChildEnv = "LSMSTATS_CLI_FATAL_CHILD"

// TestExitCodes: every exit status that lsmstats help lists is produced by
// a real situation, with its message on stderr.
func TestExitCodes(t *testing.T) {
	seen := map[int]bool{}
	check := func(name string, code, want int, stderr string, msg ...string) {
		t.Helper()
		require.Equal(t, want, code, "%s: stderr:\n%s", name, stderr)
		for _, m := range msg {
			require.Contains(t, stderr, m, name)
		}
		seen[want] = true
	}
	root := t.TempDir()

	// 0 and 2.
	_, errOut, code := runCmd(t, "help")
	check("help", code, exitOK, errOut)
	_, errOut, code = runCmd(t, "stats", "--dir")
	check("flag without value", code, exitUsage, errOut, "flag needs an argument")
	// An output file that could not be written is refused before the
	// run (which would otherwise load and backfill, then fail at its end).
	aFile := filepath.Join(root, "a-file")
	require.NoError(t, os.WriteFile(aFile, nil, 0o644))
	for _, c := range []struct{ flag, path, msg string }{
		{"--json", filepath.Join(aFile, "sub", "run.json"), "its directory: mkdir " + aFile + ": not a directory"},
		{"--json", root, "a directory, want a file"},
		{"--plot", filepath.Join(aFile, "p.png"), "its directory: mkdir " + aFile + ": not a directory"},
	} {
		_, errOut, code = runCmd(t, "backfill", "--rows", "1000", "--vnodes", "8", "--bars", "off", c.flag, c.path)
		check("output "+c.path, code, exitUsage, errOut, c.flag+" "+c.path+": "+c.msg)
		require.NotContains(t, errOut, "load", "refused before the load")
	}

	// 1: no store, and nothing created.
	missing := filepath.Join(root, "missing")
	_, errOut, code = runCmd(t, "verify", "--dir", missing)
	check("no store", code, exitError, errOut, "lsmstats verify: "+missing+" does not exist: lsmstats: no store")
	_, err := os.Stat(missing)
	require.True(t, os.IsNotExist(err))

	// 6: a difference (a live count persisted by an unchecked writer that
	// lied), and 7: a corrupt block.
	lied := filepath.Join(root, "lied")
	s, err := lsm.Open(lied, &lsm.Options{Logger: lsm.QuietLogger(io.Discard)})
	require.NoError(t, err)
	def := lsm.TableDef{ID: 5, VnodeCount: 2, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(5, nil, &lsm.WriterOptions{Unchecked: true})
	require.NoError(t, err)
	for e, pks := range [][]uint64{{1, 2}, {2}} {
		for _, pk := range pks {
			k := keys.AppendUint64(nil, pk)
			require.NoError(t, w.Insert(uint64(e+1), def.VnodeOf(k), k, []byte("row")))
		}
		require.NoError(t, w.Seal(uint64(e+1)))
		require.NoError(t, s.Commit(uint64(e+1)))
	}
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	_, errOut, code = runCmd(t, "verify", "--dir", lied)
	check("difference", code, exitDifferences, errOut, "difference")

	corrupt := filepath.Join(root, "corrupt")
	files := ddBuild(t, corrupt, 4, 500)
	ddCorruptBlock(t, filepath.Join(corrupt, "db", sstOf(t, files, "L0 t1/")), "data", 0)
	_, errOut, code = runCmd(t, "verify", "--dir", corrupt)
	check("corrupt verify", code, exitCorrupt, errOut, "lsmstats verify: the store is corrupt")
	_, errOut, code = runCmd(t, "verify", "--dir", corrupt, "--recompute-live")
	check("corrupt verify, writable", code, exitCorrupt, errOut, "lsmstats verify: the store is corrupt")
	ddCorruptBlock(t, filepath.Join(corrupt, "db", sstOf(t, files, "L6 t1/")), "properties", 0)
	_, errOut, code = runCmd(t, "stats", "--dir", corrupt, "--json")
	check("corrupt stats", code, exitCorrupt, errOut, "lsmstats stats: the store is corrupt", "physical statistics unavailable")

	// 3: the MV does not match the upstream table — a stray MV row, put
	// there before the job started.
	stray := filepath.Join(root, "stray")
	p, err := workload.Preset("uniform", 2000, 8, 1)
	require.NoError(t, err)
	s, err = lsm.Open(stray, &lsm.Options{Logger: lsm.QuietLogger(io.Discard)})
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(p.TableDef(bench.UpstreamTable)))
	up, err := s.Table(bench.UpstreamTable)
	require.NoError(t, err)
	mv := up
	mv.ID, mv.Name = bench.MVTable, "mv"
	require.NoError(t, s.CreateTable(mv))
	w, err = s.NewWriter(bench.MVTable, nil, nil)
	require.NoError(t, err)
	pk, err := mv.PK.Encode(nil, uint64(7), uint64(1<<40))
	require.NoError(t, err)
	require.NoError(t, w.Insert(1, mv.VnodeOf(pk), pk, []byte("stray")))
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1))
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	out, errOut, code := runCmd(t, "backfill", "--workload", "uniform", "--rows", "2000", "--vnodes", "8",
		"--dir", stray, "--bars", "off")
	check("mv mismatch", code, exitMVMismatch, errOut+out, "the MV does not match the upstream table")

	// 4: Pebble's Fatalf, through the CLI's logger, in a child process.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fatalChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	check("fatal", ee.ExitCode(), exitFatal, stderr.String(),
		"lsmstats: Pebble ended the process on a fatal error: MANIFEST sync failed: injected")

	// 5: a worker whose output cannot be written (its supervisor's end is
	// gone; here a full device).
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	require.NoError(t, err)
	defer full.Close()
	cmd = exec.Command(os.Args[0], "backfill", "--worker", "--rows", "2000", "--vnodes", "8",
		"--dir", filepath.Join(root, "worker"), "--bars", "off")
	cmd.Stdout = full
	stderr.Reset()
	cmd.Stderr = &stderr
	err = cmd.Run()
	require.ErrorAs(t, err, &ee)
	check("worker lost", ee.ExitCode(), exitWorkerLost, stderr.String())

	// 130: interrupted, as a terminal's Ctrl-C does (SIGINT to the whole
	// process group), during the backfill with --dir (the same command then
	// resumes it to the end) and during the load without (the temporary
	// store is removed). The rate limit keeps the backfill running for
	// several seconds: at 10,000 rows/s it finished before the signal
	// landed in 2 of 12 runs (the job got faster), unlimited more often.
	resumable := []string{"backfill", "--rows", "20000", "--vnodes", "8", "--barrier-rows", "64", "--rate-limit", "3000",
		"--dir", filepath.Join(root, "interrupted"), "--bars", "off"}
	code, errText := interruptCLI(t, resumable, "barrier ", nil)
	check("interrupted backfill", code, exitInterrupted, errText, "lsmstats backfill: interrupted; stopping the worker",
		"the same command resumes the backfill")
	out, errOut, code = runCmd(t, resumable...)
	require.Equal(t, exitOK, code, "resume: %s%s", out, errOut)
	require.Contains(t, out, "MV equals upstream: yes")
	require.Contains(t, out, "recovery showed a figure", "the rerun resumed the interrupted job")
	tmp := filepath.Join(root, "tmp")
	require.NoError(t, os.Mkdir(tmp, 0o755))
	code, errText = interruptCLI(t, []string{"backfill", "--rows", "300000", "--vnodes", "8", "--bars", "off"}, "load: ",
		[]string{"TMPDIR=" + tmp})
	check("interrupted load", code, exitInterrupted, errText, "the temporary store was removed")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the temporary store was left behind")

	for _, s := range exitStatuses {
		require.True(t, seen[s.code], "exit status %d (%s) is not tested", s.code, s.what)
	}
	require.Len(t, seen, len(exitStatuses))
}

// interruptCLI runs the CLI (this test binary, see TestMain) in a process
// group of its own, sends SIGINT to the group when a line of its stdout
// starts with after, and returns its exit status and stderr.
func interruptCLI(t *testing.T, args []string, after string, env []string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	sent := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if !sent && strings.HasPrefix(sc.Text(), after) {
			require.NoError(t, syscall.Kill(-cmd.Process.Pid, syscall.SIGINT))
			sent = true
		}
	}
	err = cmd.Wait()
	require.True(t, sent, "no line starting with %q; stderr:\n%s", after, stderr.String())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stderr:\n%s", stderr.String())
	return ee.ExitCode(), stderr.String()
}

// sstOf returns the file name of the first SST of a ddBuild listing whose
// line holds what (its level and first key, such as "L0 t1/").
func sstOf(t *testing.T, listing, what string) string {
	for _, line := range strings.Split(listing, "\n") {
		if num, rest, ok := strings.Cut(line, " "); ok && strings.HasPrefix(rest, what) {
			return num + ".sst"
		}
	}
	t.Fatalf("no SST at %q in:\n%s", what, listing)
	return ""
}
