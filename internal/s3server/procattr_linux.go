package s3server

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
)

// procAttr puts the server in a process group of its own (so that killing
// the group kills anything it started) and has the kernel kill it when the
// thread that started it exits (see launch), so that a test binary that
// dies leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits until every thread of process pid is stopped (state T
// or t in /proc/PID/task/TID/stat), for at most timeout.
func waitStopped(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		running, err := runningThreads(pid)
		if err != nil {
			return err
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Newf("s3server: %d threads of process %d still running %v after SIGSTOP", running, pid, timeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// runningThreads counts the threads of process pid that are not stopped.
func runningThreads(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, errors.Wrap(err, "s3server: the server's threads")
	}
	running := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue // the thread exited
		}
		// "pid (comm) state ...": comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return 0, errors.Newf("s3server: %s/%s/stat: no state in %q", dir, task.Name(), stat)
		}
		if st := stat[i+2]; st != 'T' && st != 't' {
			running++
		}
	}
	return running, nil
}
