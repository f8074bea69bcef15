package ssttracker

// Loading new SSTs, several at once.
//
// Reading an SST's properties is a few small reads at its end: from local
// disk they cost microseconds of CPU, from an object store a request's
// round trip each (TrackerConfig.OpenRemote), during which the loader
// waits. A refresh that meets many new files at once — the first one
// after Open lists every live SST, a recomputation reads them all, a
// compaction can write dozens — therefore reads them with up to
// TrackerConfig.LoadParallelism loads in flight, so that a restart on an
// object store waits for about one round trip per LoadParallelism files,
// not one per file. A single new file (a flush) is read on the caller's
// goroutine.
//
// The Version does not depend on the order the loads finish in: each
// result has its place (the file's), and the callers walk the results in
// file-number order, as they would walk the files. Nor do the error a
// refresh returns and the lines the loads log (each load's are held, and
// written in file order once all have finished). The loads start in file-number order and none starts
// once one has failed with an error that stops the walk (see loadAll):
// every file before the first such failure has its result, so the walk's
// first error is the one a sequential walk meets. Loads in flight when one
// fails finish (their requests are bounded by the object store's retry
// policy); their results are cached for the listing that may follow.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/errors/oserror"
	"github.com/cockroachdb/pebble/v2"
)

// DefaultLoadParallelism is the number of SSTs a refresh reads at once
// unless TrackerConfig.LoadParallelism says otherwise: enough to hide an
// object store's latency (on loopback, about a millisecond a request)
// behind the other loads, few enough that the reads' buffers (an object
// store's tail read, tens of KiB each) stay small.
const DefaultLoadParallelism = 16

// errNotLoaded is the result of a file whose load did not start because
// an earlier one failed; a walk in order never reaches it.
var errNotLoaded = errors.New("lsmstats/stats: not loaded: an earlier file failed")

// heldLog is a pebble.Logger that holds the lines of one load until
// replay, so that the lines of loads run at once come in file order. Not
// safe for concurrent use: each load has its own.
type heldLog struct {
	to    pebble.Logger // Fatalf's
	lines []heldLine
}

type heldLine struct {
	err  bool
	text string
}

// Infof implements pebble.Logger.
func (h *heldLog) Infof(format string, args ...any) {
	h.lines = append(h.lines, heldLine{text: fmt.Sprintf(format, args...)})
}

// Errorf implements pebble.Logger.
func (h *heldLog) Errorf(format string, args ...any) {
	h.lines = append(h.lines, heldLine{err: true, text: fmt.Sprintf(format, args...)})
}

// Fatalf implements pebble.Logger: it is not held.
func (h *heldLog) Fatalf(format string, args ...any) { h.to.Fatalf(format, args...) }

// replay writes the lines held to log.
func (h *heldLog) replay(log pebble.Logger) {
	for _, l := range h.lines {
		if l.err {
			log.Errorf("%s", l.text)
		} else {
			log.Infof("%s", l.text)
		}
	}
	h.lines = nil
}

// loadResult is the outcome of loading one new SST.
type loadResult struct {
	f   *liveFile
	err error
}

// stops reports whether a load's error stops the callers' walk: any
// error, except a vanished file when skipVanished.
func stops(err error, skipVanished bool) bool {
	return err != nil && !(skipVanished && oserror.IsNotExist(err))
}

// loadAll loads refs, the SSTs new to a Version in file-number order, and
// returns their results in the same order: up to l.cfg.LoadParallelism
// at once, started in order, none started after a load failed with an
// error that stops the walk (stops). A file loaded before by this loader
// is taken from l.cache (at its level in refs); a file loaded is added to
// it.
func (l *loader) loadAll(ctx context.Context, refs []*sstRef, skipVanished bool) []loadResult {
	out := make([]loadResult, len(refs))
	var todo []int
	for i, ref := range refs {
		if f, ok := l.cached(ref); ok {
			out[i].f = f
		} else {
			todo = append(todo, i)
		}
	}
	if n := l.cfg.LoadParallelism; n <= 1 || len(todo) <= 1 {
		for k, i := range todo {
			out[i].f, out[i].err = l.loadFile(ctx, refs[i], l.cfg.Logger)
			if stops(out[i].err, skipVanished) {
				for _, j := range todo[k+1:] {
					out[j].err = errNotLoaded
				}
				break
			}
		}
	} else {
		var (
			wg      sync.WaitGroup
			stopped atomic.Bool
			slots   = make(chan struct{}, n)
			logs    = make([]heldLog, len(refs))
		)
		for k, i := range todo {
			slots <- struct{}{}
			if stopped.Load() {
				<-slots
				for _, j := range todo[k:] {
					out[j].err = errNotLoaded
				}
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				logs[i].to = l.cfg.Logger
				f, err := l.loadFile(ctx, refs[i], &logs[i])
				out[i] = loadResult{f: f, err: err}
				if stops(err, skipVanished) {
					stopped.Store(true)
				}
			}()
		}
		wg.Wait()
		for i := range logs {
			logs[i].replay(l.cfg.Logger)
		}
	}
	for _, i := range todo {
		if out[i].err == nil {
			l.cache[refs[i].fileNum] = out[i].f
		}
	}
	return out
}
