package s3server

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// shared is the test binary's shared server (Shared), started on first use.
var shared struct {
	sync.Mutex
	running bool // RunTests is running the tests
	srv     *Server
	err     error
}

// RunTests runs the tests of m (m.Run) and then stops the shared server, if
// a test started it. A package whose tests call Shared calls it from
// TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
func RunTests(m *testing.M) int {
	shared.Lock()
	shared.running = true
	shared.Unlock()
	code := m.Run()
	shared.Lock()
	defer shared.Unlock()
	shared.running = false
	if shared.srv != nil {
		if err := shared.srv.close(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			if code == 0 {
				code = 1
			}
		}
		shared.srv = nil
	}
	return code
}

// Shared returns the test binary's shared server, starting it on the first
// call. Tests that share it work in buckets of their own (NewBucket) and
// must not stop or pause it. It fails the test when the server cannot
// start (naming `make objstore` when the binary is missing) or when the
// package's TestMain does not call RunTests (which stops the server).
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if !shared.running {
		t.Fatal("s3server: Shared needs the package's TestMain to call s3server.RunTests, which stops the shared server")
	}
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = start()
	}
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.srv
}

// TestingM returns m as a testing.M-like value whose Run is RunTests(m),
// for a TestMain that hands its tests to another runner, as goleak's:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(s3server.TestingM(m)) }
func TestingM(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int { return RunTests(r.m) }
