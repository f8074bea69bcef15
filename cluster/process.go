package cluster

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/lsm"
)

// ServeConfig configures a node process (Serve).
type ServeConfig struct {
	Name string
	// Store opens the node's store (its object store the cluster's).
	Dir   string
	Store *lsm.Options
	// Backup names the store's backup in the object store (NewNode); ""
	// for none. A node started on a directory that holds no store restores
	// the backup there first, if there is one (lsm.Restore): the node of
	// a lost disk comes back at its last backup.
	Backup string
	// Listen is the address to serve on (127.0.0.1:0 when empty).
	Listen string
	// Ready gets the address served on, once the store is open; a child
	// process writes it to its stdout for its launcher (Process).
	Ready func(addr string)
	Log   *slog.Logger
}

// readyPrefix starts the line a node process writes when it serves.
const readyPrefix = "lsmstats node listening on "

// Serve runs a node until a Stop call or ctx ends: it opens the store,
// serves the node's gRPC service, and closes both.
func Serve(ctx context.Context, cfg ServeConfig) (err error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.Backup != "" {
		info, err := lsm.Restore(ctx, cfg.Dir, cfg.Store, cfg.Backup)
		switch {
		case err == nil:
			log.Warn("store restored from its backup", "node", cfg.Name, "dir", cfg.Dir, "backup", cfg.Backup, "seq", info.Seq,
				"epoch", info.Epoch, "files", info.Files, "bytes", info.Bytes, "ssts", info.Objects, "removed_ssts", info.Removed,
				"took", info.Took.Round(time.Millisecond))
		case errors.Is(err, lsm.ErrStoreExists), errors.Is(err, lsm.ErrNoBackup):
		default:
			return errors.Wrapf(err, "node %s", cfg.Name)
		}
	}
	store, err := lsm.Open(cfg.Dir, cfg.Store)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); err == nil {
			err = cerr
		}
	}()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return errors.Wrapf(err, "node %s: listen on %s", cfg.Name, cfg.Listen)
	}
	n := NewNode(cfg.Name, store, cfg.Backup, cfg.Log)
	stopped := make(chan struct{})
	srv := NewServer(&stopping{Node: n, stopped: stopped})
	var once sync.Once
	stop := func() { once.Do(func() { go srv.GracefulStop() }) }
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped:
		}
		stop()
	}()
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr().String())
	}
	serr := srv.Serve(lis)
	_, cerr := n.Stop(context.Background(), &Empty{})
	return errors.CombineErrors(serr, cerr)
}

// stopping is a node whose Stop call also ends Serve.
type stopping struct {
	*Node
	stopped chan struct{}
	once    sync.Once
}

func (s *stopping) Stop(ctx context.Context, e *Empty) (*Empty, error) {
	resp, err := s.Node.Stop(ctx, e)
	s.once.Do(func() { close(s.stopped) })
	return resp, err
}

// Process launches a node as a child process: Args are the command that
// runs it (say, lsmstats node --dir …), which must write the ready line
// (ReadyLine) to its stdout; the rest of its stdout and its stderr go to
// Log.
type Process struct {
	Args []string
	Env  []string
	Log  io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

// ReadyLine is the line a node process writes to its stdout once it
// serves on addr.
func ReadyLine(addr string) string { return readyPrefix + addr }

// Start implements Launcher.
func (p *Process) Start(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return "", errors.Newf("cluster: node process %v is running", p.Args)
	}
	cmd := exec.Command(p.Args[0], p.Args[1:]...)
	cmd.Env = append(os.Environ(), p.Env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", err
	}
	logw := p.Log
	if logw == nil {
		logw = io.Discard
	}
	cmd.Stderr = logw
	if err := cmd.Start(); err != nil {
		return "", errors.Wrapf(err, "cluster: start node process %v", p.Args)
	}
	p.cmd, p.done = cmd, make(chan error, 1)
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, readyPrefix); ok && !sent {
				addrc <- a
				sent = true
				continue
			}
			fmt.Fprintln(logw, line)
		}
		if !sent {
			close(addrc)
		}
		p.done <- cmd.Wait()
	}()
	select {
	case a, ok := <-addrc:
		if ok {
			return a, nil
		}
		err := <-p.done
		p.cmd = nil
		return "", errors.Newf("cluster: node process %v exited before it served: %v", p.Args, err)
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return "", ctx.Err()
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		return "", errors.Newf("cluster: node process %v did not serve within 2 minutes", p.Args)
	}
}

// Kill implements Launcher: SIGKILL, and the process is reaped.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.cmd = nil
	return nil
}

// Stop implements Launcher: it waits up to 30 seconds for the process to
// exit, then kills it.
func (p *Process) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	defer func() { p.cmd = nil }()
	select {
	case err := <-p.done:
		if err != nil {
			return errors.Wrapf(err, "cluster: node process %v", p.Args)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return errors.Newf("cluster: node process %v did not exit within 30 seconds of its Stop; killed", p.Args)
	}
}

// Signal sends sig to the running process (SIGSTOP and SIGCONT make a
// node stop answering, and answer again, as a hung machine would).
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return errors.Newf("cluster: node process %v is not running", p.Args)
	}
	return p.cmd.Process.Signal(sig)
}
