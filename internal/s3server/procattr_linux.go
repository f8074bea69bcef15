package s3server

import "syscall"

// procAttr puts the server in a process group of its own (so that killing
// the group kills anything it started) and has the kernel kill it when the
// thread that started it exits (see launch), so that a test binary that
// dies leaves no server behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
