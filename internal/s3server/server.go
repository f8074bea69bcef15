package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Region is the region the server's clients sign requests for (SeaweedFS
// accepts any).
const Region = "us-east-1"

// startTimeout bounds the wait for a server to answer S3 requests after it
// was started; generous, because the machines that run the tests are shared
// and busy.
const startTimeout = 90 * time.Second

// Server is one `weed mini` process on 127.0.0.1. Its exported fields are
// set by Start and do not change afterwards (Stop and Start keep the ports,
// credentials and data). Its methods are safe for concurrent use.
type Server struct {
	// Endpoint is the S3 endpoint, "http://127.0.0.1:PORT".
	Endpoint string
	// AccessKey and SecretKey are the credentials of the server's one
	// identity, an administrator (random for each server).
	AccessKey, SecretKey string
	// Bucket is a bucket created at start, for the test's use.
	Bucket string

	dir string // data directory; also holds the log and the unix sockets
	bin string
	// sockets are the gRPC unix sockets weed mini makes in /tmp, whatever
	// its flags say (one per gRPC port); a killed server leaves them.
	sockets []string
	args    []string
	env     []string
	client  *minio.Client

	mu     sync.Mutex
	proc   *process // nil while stopped
	paused bool
}

// process is one run of the server's binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // cmd.Wait's result, once done
}

// Start starts a server of the test's own, with a bucket (Server.Bucket),
// and stops it when the test ends (killing it, then removing its data). It
// fails the test, naming `make objstore`, when the binary is missing or the
// server does not come up.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("s3server: end of %s:\n%s", s.logPath(), s.logTail(40))
		}
		if err := s.close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// Launch starts a server for a program rather than a test (the demo's
// tools/s3run): as Start, with a bucket (Server.Bucket), and the caller
// stops it with Close.
func Launch() (*Server, error) { return start() }

// Close kills a server that Launch started and removes its data.
func (s *Server) Close() error { return s.close() }

// start starts a server, trying again on new ports when another process
// took one of the chosen ports before the server bound it.
func start() (*Server, error) {
	bin, err := BinaryPath()
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(bin); err != nil {
		return nil, missingBinaryError(bin, err)
	} else if fi.Mode()&0o111 == 0 {
		return nil, missingBinaryError(bin, errors.New("not executable"))
	}
	var lastErr error
	for range 3 {
		s, err := newServer(bin)
		if err != nil {
			return nil, err
		}
		if err = s.launch(); err == nil {
			return s, nil
		}
		lastErr = err
		_ = s.close()
		if !strings.Contains(err.Error(), "not available") && !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, lastErr
}

// newServer chooses the ports, credentials and data directory of a server
// and builds its command line; it starts nothing.
func newServer(bin string) (*Server, error) {
	ports, err := freePorts(11)
	if err != nil {
		return nil, err
	}
	// A short directory: the filer's and the S3 gateway's unix sockets live
	// in it, and a socket's path must fit in 108 bytes.
	removeStaleDirs()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, errors.Wrap(err, "s3server: data directory")
	}
	var sockets []string
	for _, grpc := range []struct {
		service string
		port    int
	}{{"master", ports[1]}, {"volume", ports[3]}, {"filer", ports[5]}, {"s3", ports[7]}, {"admin", ports[10]}} {
		sockets = append(sockets, fmt.Sprintf("/tmp/seaweedfs-%s-grpc-%d.sock", grpc.service, grpc.port))
	}
	owner := strconv.Itoa(os.Getpid()) + "\n" + strings.Join(sockets, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner), 0o644); err != nil {
		_ = os.RemoveAll(dir)
		return nil, errors.Wrap(err, "s3server: data directory")
	}
	s := &Server{
		Endpoint:  "http://127.0.0.1:" + strconv.Itoa(ports[6]),
		AccessKey: "AK" + strings.ToUpper(randomHex(9)),
		SecretKey: randomHex(20),
		Bucket:    "b-" + randomHex(6),
		dir:       dir,
		bin:       bin,
		sockets:   sockets,
	}
	s.args = []string{
		// glog's files would litter the temporary directory: its lines go
		// to the server's log (weed.log) instead.
		"-logtostderr",
		"mini",
		"-dir=" + dir,
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-bucket=" + s.Bucket + "," + s.probeBucket(),
		"-master.telemetry=false",
		// Each bucket is a SeaweedFS collection with a volume of its own
		// (1 GiB at most in mini, not preallocated). Left to itself, mini
		// allows free disk / 1 GiB volumes: on a machine with 35 GiB free
		// the 31st bucket's first write got HTTP 500 ("no free volumes
		// left"), which no retry mends. The test binaries make a few
		// hundred buckets at most.
		"-volume.max=" + strconv.Itoa(maxVolumes),
		"-master.port=" + strconv.Itoa(ports[0]), "-master.port.grpc=" + strconv.Itoa(ports[1]),
		"-volume.port=" + strconv.Itoa(ports[2]), "-volume.port.grpc=" + strconv.Itoa(ports[3]),
		"-filer.port=" + strconv.Itoa(ports[4]), "-filer.port.grpc=" + strconv.Itoa(ports[5]),
		"-s3.port=" + strconv.Itoa(ports[6]), "-s3.port.grpc=" + strconv.Itoa(ports[7]),
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-webdav=false", "-webdav.port=" + strconv.Itoa(ports[8]),
		"-admin.ui=false", "-admin.port=" + strconv.Itoa(ports[9]), "-admin.port.grpc=" + strconv.Itoa(ports[10]),
		"-admin.port.legacy=0",
		"-filer.localSocket=" + filepath.Join(dir, "filer.sock"),
		"-s3.localSocket=" + filepath.Join(dir, "s3.sock"),
	}
	// The server's identity comes from the AWS variables (SeaweedFS makes
	// them an administrator); none of the caller's AWS or S3 settings leak
	// into it.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") && !strings.HasPrefix(kv, "S3_") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
	s.client, err = minio.New(strings.TrimPrefix(s.Endpoint, "http://"), &minio.Options{
		Creds:      credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:     Region,
		MaxRetries: 1,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, errors.Wrap(err, "s3server: client")
	}
	return s, nil
}

// Client returns an S3 client signed with the server's credentials, for
// tests that look into the bucket behind the code under test (list what it
// wrote, delete or damage an object).
func (s *Server) Client() *minio.Client { return s.client }

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// PID returns the server's process id, 0 while it is stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

// RSS returns the server's resident memory in bytes (Linux only).
func (s *Server) RSS() (int64, error) {
	pid := s.PID()
	if pid == 0 {
		return 0, errors.New("s3server: the server is stopped")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, errors.Wrap(err, "s3server: resident memory")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.Newf("s3server: no VmRSS in /proc/%d/status", pid)
}

// NewBucket creates a bucket with a name of its own and returns the name.
// Tests that share a server (Shared) each work in a bucket of their own.
func (s *Server) NewBucket(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("b-%d-%s", bucketSeq.Add(1), randomHex(4))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.MakeBucket(ctx, name, minio.MakeBucketOptions{Region: Region}); err != nil {
		t.Fatalf("s3server: creating bucket %q at %s: %v", name, s.Endpoint, err)
	}
	return name
}

var bucketSeq atomic.Int64

// maxVolumes is the server's volume budget: one per bucket.
const maxVolumes = 2000

// Stop kills the server (SIGKILL, as a crash) and waits until it has
// exited; its data stay, and Start starts it again. Stopping a stopped
// server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if err := s.kill(); err != nil {
		t.Fatal(err)
	}
}

// Start starts a stopped server again on the same ports, credentials and
// data, and waits until it answers S3 requests. Starting a running server
// does nothing.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	if err := s.launch(); err != nil {
		t.Fatal(err)
	}
}

// Pause freezes the server (SIGSTOP): it accepts connections (the kernel
// does) but answers nothing until Resume.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGSTOP, true); err != nil {
		t.Fatal(err)
	}
	// The kernel stops a process's threads one by one as each next enters
	// it: on a loaded machine a thread still serving requests can answer
	// one after kill returned. Pause returns once every thread has stopped.
	s.mu.Lock()
	pid := s.proc.cmd.Process.Pid
	s.mu.Unlock()
	if err := waitStopped(pid, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Resume thaws a paused server (SIGCONT).
func (s *Server) Resume(t testing.TB) {
	t.Helper()
	if err := s.signal(syscall.SIGCONT, false); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) signal(sig syscall.Signal, paused bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return errors.Newf("s3server: %v to a stopped server", sig)
	}
	if err := syscall.Kill(-s.proc.cmd.Process.Pid, sig); err != nil {
		return errors.Wrapf(err, "s3server: %v to process group %d", sig, s.proc.cmd.Process.Pid)
	}
	s.paused = paused
	return nil
}

// launch starts the server's process and waits until it answers.
func (s *Server) launch() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		return nil
	}
	logFile, err := os.OpenFile(s.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return errors.Wrap(err, "s3server: log")
	}
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, s.env, logFile, logFile
	cmd.SysProcAttr = procAttr()
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// On Linux the kernel kills the server when the thread that started
		// it exits (Pdeathsig), so that thread must live as long as the
		// server: this goroutine keeps it locked until the server exits.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			logFile.Close()
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return errors.Wrapf(err, "s3server: starting %s", s.bin)
	}
	s.proc, s.paused = p, false
	if err := s.waitReady(p); err != nil {
		s.killLocked()
		return err
	}
	return nil
}

// waitReady waits until the server has the bucket and stores and deletes
// an object, or fails with the end of its log.
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return errors.Newf("s3server: %s exited while starting (%v); run `make objstore` if the binary is damaged. End of %s:\n%s",
				s.bin, p.err, s.logPath(), s.logTail(30))
		default:
		}
		if lastErr = s.probe(); lastErr == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.Newf("s3server: %s did not answer S3 requests at %s within %s (last: %v); run `make objstore` if the binary is damaged. End of %s:\n%s",
		s.bin, s.Endpoint, startTimeout, lastErr, s.logPath(), s.logTail(30))
}

// probeBucket is the bucket probe writes in: not the test's, which a write
// that timed out but landed later would otherwise pollute.
func (s *Server) probeBucket() string { return s.Bucket + "-probe" }

// probe stores, reads and deletes a small object, once the server has the
// test's bucket.
func (s *Server) probe() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, bucket := range []string{s.Bucket, s.probeBucket()} {
		ok, err := s.client.BucketExists(ctx, bucket)
		if err != nil {
			return err
		}
		if !ok {
			return errors.Newf("no bucket %q yet", bucket)
		}
	}
	const name, body = "probe", "ready"
	if _, err := s.client.PutObject(ctx, s.probeBucket(), name, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{}); err != nil {
		return err
	}
	obj, err := s.client.GetObject(ctx, s.probeBucket(), name, minio.GetObjectOptions{})
	if err != nil {
		return err
	}
	var got bytes.Buffer
	_, err = got.ReadFrom(obj)
	obj.Close()
	if err != nil {
		return err
	}
	if got.String() != body {
		return errors.Newf("probe object read back as %q", got.String())
	}
	return s.client.RemoveObject(ctx, s.probeBucket(), name, minio.RemoveObjectOptions{})
}

// kill kills the server's process group and waits for the server to exit.
func (s *Server) kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	p := s.proc
	if p == nil {
		return nil
	}
	pid := p.cmd.Process.Pid
	// The whole group: the server is its leader (Setpgid), and anything it
	// started is in it too.
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return errors.Wrapf(err, "s3server: killing process group %d", pid)
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		return errors.Newf("s3server: process %d did not exit within 30s of SIGKILL", pid)
	}
	s.proc, s.paused = nil, false
	removeFiles(s.sockets)
	return nil
}

// removeFiles removes the files at paths that exist.
func removeFiles(paths []string) {
	for _, p := range paths {
		_ = os.Remove(p)
	}
}

// close kills the server and removes its data.
func (s *Server) close() error {
	if err := s.kill(); err != nil {
		return err
	}
	return errors.Wrap(os.RemoveAll(s.dir), "s3server: removing the data directory")
}

func (s *Server) logPath() string { return filepath.Join(s.dir, "weed.log") }

// logTail returns the last n lines of the server's log.
func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(s.logPath())
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePorts returns n distinct ports that are free on 127.0.0.1 now, chosen
// at random below Linux's ephemeral range (32768 and up), so that the
// outgoing connections of other processes do not take them before the
// server binds them.
func freePorts(n int) ([]int, error) {
	const lo, hi = 20000, 32768
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 10000 {
			return nil, errors.Newf("s3server: found only %d free ports on 127.0.0.1 in [%d, %d)", len(ports), lo, hi)
		}
		r, err := rand.Int(rand.Reader, big.NewInt(hi-lo))
		if err != nil {
			return nil, errors.Wrap(err, "s3server: random port")
		}
		p := lo + int(r.Int64())
		if seen[p] {
			continue
		}
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		ports = append(ports, p)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The data directories are os.TempDir()/lsmstats-weed-*, each with, in
// ownerFile, the pid of the test binary that made it and the paths of its
// server's gRPC sockets, one a line.
const (
	dirPrefix = "lsmstats-weed-"
	ownerFile = "owner.pid"
)

// removeStaleDirs removes the data directories (and the gRPC sockets) of
// test binaries that died without cleaning up (a panic, a timeout, a
// SIGKILL: their servers died with them, by Pdeathsig).
func removeStaleDirs() {
	entries, err := os.ReadDir(os.TempDir())
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(os.TempDir(), e.Name())
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		pid, err := strconv.Atoi(lines[0])
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			removeFiles(lines[1:])
			_ = os.RemoveAll(dir)
		}
	}
}
