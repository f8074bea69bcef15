package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"runtime/pprof"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/keys"
)

// The raw-Pebble pipeline is the yardstick of the store's throughput: the
// same work on the same rows, written by hand on a Pebble database opened
// with the store's own Pebble options (lsm.Options.PebbleOptions: comparer,
// statistics collector, L0 and compaction settings; a compaction scheduler
// of its own, with the store's policy), or with Pebble's defaults
// (Config.RawOptions, PebbleDefaults), in the same key format,
// with the same sync policy — one synced commit per checkpoint. What it
// leaves out is what the store adds: buffering writers, epochs, atomic
// ingestion, statistics, snapshot reads per vnode, actors, progress.
//
//   - The load: each step of the load and of the churn before the backfill
//     (the same steps of the same generator) is one batch of versioned keys,
//     committed with Sync.
//   - The backfill: each step writes its upstream ops (the churn during the
//     backfill) and a checkpoint's worth of snapshot rows (Actors ×
//     BarrierRows): a fresh iterator over the upstream table, sought past the
//     cursor, reads the newest version of each pk (skipping deletes) in key
//     order and writes each row into the MV's keyspace; the step's ops at or
//     below the cursor are forwarded into the MV too (those above it are read
//     by later snapshots); then one synced commit. It stops one step after
//     the scan ends, as the job does.
//
// Times exclude the workload generator (Summary excludes it the same way),
// and the run ends by checking that the raw MV equals the raw upstream.

// RawResult is what the raw-Pebble pipeline measured.
type RawResult struct {
	// LoadOps are the ops of the load and churn before the backfill, and
	// Load their time; SnapshotRows the rows the scan read, and Backfill
	// its time. Both times exclude the generator.
	LoadOps      uint64
	Load         time.Duration
	SnapshotRows uint64
	Backfill     time.Duration
	// LoadCPU and BackfillCPU are the process's CPU time in each phase,
	// less the generator's time.
	LoadCPU, BackfillCPU time.Duration
	// LoadLSM and BackfillLSM are the bytes Pebble wrote in each phase.
	LoadLSM, BackfillLSM LSMWrites
}

// LoadRate returns load ops per second.
func (r RawResult) LoadRate() float64 { return rate(r.LoadOps, r.Load) }

// SnapshotRate returns snapshot rows per second.
func (r RawResult) SnapshotRate() float64 { return rate(r.SnapshotRows, r.Backfill) }

// PebbleDefaults returns Pebble's default options, but for the comparer
// of the store's key format (keys.Comparer: the raw pipelines' reads
// skip older versions by prefix) and the logger: a raw pipeline's
// Config.RawOptions for a yardstick of Pebble as it comes.
func PebbleDefaults(logger pebble.Logger) *pebble.Options {
	o := &pebble.Options{Comparer: keys.Comparer, Logger: logger}
	o.EnsureDefaults()
	return o
}

func rate(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// RunRaw runs cfg's workload through the raw-Pebble pipeline in cfg.Dir
// (which must not hold a store).
func RunRaw(ctx context.Context, cfg Config) (RawResult, error) {
	return runRaw(ctx, cfg, false)
}

// RunRawInterleaved is RunRaw with the backfill's read order: each
// checkpoint takes its quota from every unfinished vnode in turn, as the
// store's actors do (design.md §6), instead of scanning the table in key
// order. Its MV writes then cover every vnode at every checkpoint, as the
// store's do, and Pebble compacts them as it does the store's: the
// difference from RunRaw is the price of the interleaved order itself.
func RunRawInterleaved(ctx context.Context, cfg Config) (RawResult, error) {
	return runRaw(ctx, cfg, true)
}

func runRaw(ctx context.Context, cfg Config, interleaved bool) (RawResult, error) {
	var res RawResult
	if cfg.User != nil {
		return res, errors.New("bench: the raw-Pebble pipeline runs the workload only, not a user's job")
	}
	g, err := workload.New(cfg.Workload)
	if err != nil {
		return res, err
	}
	opts := cfg.Store.PebbleOptions()
	if cfg.RawOptions != nil {
		opts = cfg.RawOptions()
	}
	db, err := pebble.Open(cfg.Dir, opts)
	if err != nil {
		return res, errors.Wrap(err, "bench: open raw pebble")
	}
	defer db.Close()
	r := &rawRun{db: db, g: g}
	if interleaved {
		r.cursors = make([][]byte, g.Params().VnodeCount)
		r.finished = make([]bool, g.Params().VnodeCount)
	}
	if cfg.OnStart != nil {
		cfg.OnStart(&Session{Raw: db})
	}

	// The load and the churn before the backfill.
	defer pprof.SetGoroutineLabels(ctx)
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("phase", "raw-load")))
	start, cpu, lsm0 := time.Now(), processCPU(), lsmWrites(db.Metrics())
	for g.Step()+1 < g.BackfillStep() {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		b := db.NewBatch()
		ops := r.next()
		if err := r.writeUpstream(b, ops); err != nil {
			return res, err
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return res, err
		}
		_ = b.Close()
		res.LoadOps += uint64(len(ops))
	}
	res.Load = time.Since(start) - r.h.d
	res.LoadCPU = processCPU() - cpu - r.h.cpu
	lsm1 := lsmWrites(db.Metrics())
	res.LoadLSM = lsm1.Sub(lsm0)
	r.h = harness{}

	// The backfill.
	actors, barrierRows := max(cfg.Actors, 1), cfg.BarrierRows
	if barrierRows <= 0 {
		barrierRows = 2048
	}
	quota := actors * barrierRows
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("phase", "raw-backfill")))
	start, cpu = time.Now(), processCPU()
	done, tail := false, 0
	for !done || tail < 1 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if done {
			tail++
		}
		b := db.NewBatch()
		ops := r.next()
		if !done {
			scan := r.scan
			if interleaved {
				scan = r.scanInterleaved
			}
			n, finished, err := scan(b, quota)
			if err != nil {
				return res, err
			}
			res.SnapshotRows += uint64(n)
			done = finished
		}
		if err := r.writeUpstream(b, ops); err != nil {
			return res, err
		}
		if err := r.forward(b, ops, done); err != nil {
			return res, err
		}
		if err := b.Commit(pebble.Sync); err != nil {
			return res, err
		}
		_ = b.Close()
	}
	res.Backfill = time.Since(start) - r.h.d
	res.BackfillCPU = processCPU() - cpu - r.h.cpu
	res.BackfillLSM = lsmWrites(db.Metrics()).Sub(lsm1)
	if err := r.compare(); err != nil {
		return res, err
	}
	if cfg.OnEnd != nil {
		cfg.OnEnd(&Session{Raw: db})
	}
	return res, nil
}

// rawRun is the state of one raw pipeline. Its epochs count steps.
type rawRun struct {
	db     *pebble.DB
	g      *workload.Generator
	h      harness
	epoch  uint64
	cursor []byte // upstream prefix of the last snapshot row
	key    []byte
	// cursors and finished are the per-vnode state of an interleaved run.
	cursors  [][]byte
	finished []bool
}

// next returns the next step's ops, timing the generator apart.
func (r *rawRun) next() []workload.Op {
	var ops []workload.Op
	r.h.time(func() { ops = r.g.Next() })
	r.epoch++
	return ops
}

func (r *rawRun) set(b *pebble.Batch, table uint32, op workload.Op) error {
	kind, row := keys.KindPut, op.NewRow
	if op.Kind == workload.Delete {
		kind, row = keys.KindDelete, nil
	}
	r.key = keys.AppendVersioned(r.key[:0], table, op.Vnode, op.PK, keys.MakeVersion(r.epoch, 0), kind)
	return b.Set(r.key, row, nil)
}

func (r *rawRun) writeUpstream(b *pebble.Batch, ops []workload.Op) error {
	for _, op := range ops {
		if err := r.set(b, UpstreamTable, op); err != nil {
			return err
		}
	}
	return nil
}

// forward writes into the MV the ops the snapshot will not read: all of
// them once the scan is done, else those at or below the cursor (of their
// vnode, in an interleaved run).
func (r *rawRun) forward(b *pebble.Batch, ops []workload.Op, done bool) error {
	for _, op := range ops {
		if !done {
			r.key = keys.AppendPrefix(r.key[:0], UpstreamTable, op.Vnode, op.PK)
			cursor := r.cursor
			if r.cursors != nil {
				if r.finished[op.Vnode] {
					cursor = r.key
				} else {
					cursor = r.cursors[op.Vnode]
				}
			}
			if cursor == nil || bytes.Compare(r.key, cursor) > 0 {
				continue
			}
		}
		if err := r.set(b, MVTable, op); err != nil {
			return err
		}
	}
	return nil
}

// scan reads up to quota rows past the cursor at the last commit and
// writes them into the MV; finished reports that the table is exhausted.
func (r *rawRun) scan(b *pebble.Batch, quota int) (n int, finished bool, err error) {
	lo, hi := keys.TableSpan(UpstreamTable)
	it, err := r.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	valid := it.First()
	if r.cursor != nil {
		valid = it.SeekGE(r.cursor)
		if valid && bytes.Equal(prefixOf(it.Key()), r.cursor) {
			valid = it.NextPrefix()
		}
	}
	version := keys.MakeVersion(r.epoch, 0)
	for ; valid && n < quota; valid = it.NextPrefix() {
		key := it.Key()
		prefix := prefixOf(key)
		// Every version is committed: the first of a prefix is the newest.
		if key[len(key)-2] != keys.KindPut {
			continue
		}
		val, err := it.ValueAndErr()
		if err != nil {
			return n, false, err
		}
		r.key = append(r.key[:0], prefix...)
		binary.BigEndian.PutUint32(r.key, MVTable)
		r.key = keys.AppendSuffix(r.key, version, keys.KindPut)
		if err := b.Set(r.key, val, nil); err != nil {
			return n, false, err
		}
		r.cursor = append(r.cursor[:0], prefix...)
		n++
	}
	return n, !valid, it.Error()
}

// scanInterleaved reads the quota from the unfinished vnodes in turn:
// each gets an equal share (the first ones one more), and a vnode that
// runs out is finished. One iterator moves from vnode to vnode.
func (r *rawRun) scanInterleaved(b *pebble.Batch, quota int) (n int, finished bool, err error) {
	var unfinished []int
	for v, f := range r.finished {
		if !f {
			unfinished = append(unfinished, v)
		}
	}
	it, err := r.db.NewIter(&pebble.IterOptions{})
	if err != nil {
		return 0, false, err
	}
	defer it.Close()
	version := keys.MakeVersion(r.epoch, 0)
	for len(unfinished) > 0 && n < quota {
		share, extra := (quota-n)/len(unfinished), (quota-n)%len(unfinished)
		var still []int
		for j, v := range unfinished {
			want := share
			if j < extra {
				want++
			}
			lo, hi := keys.VnodeSpan(UpstreamTable, uint16(v))
			it.SetBounds(lo, hi)
			var valid bool
			if c := r.cursors[v]; c == nil {
				valid = it.First()
			} else if valid = it.SeekGE(c); valid && bytes.Equal(prefixOf(it.Key()), c) {
				valid = it.NextPrefix()
			}
			got := 0
			for ; valid && got < want; valid = it.NextPrefix() {
				key := it.Key()
				if key[len(key)-2] != keys.KindPut {
					continue
				}
				val, err := it.ValueAndErr()
				if err != nil {
					return n, false, err
				}
				prefix := prefixOf(key)
				r.key = append(r.key[:0], prefix...)
				binary.BigEndian.PutUint32(r.key, MVTable)
				r.key = keys.AppendSuffix(r.key, version, keys.KindPut)
				if err := b.Set(r.key, val, nil); err != nil {
					return n, false, err
				}
				r.cursors[v] = append(r.cursors[v][:0], prefix...)
				got++
			}
			n += got
			if err := it.Error(); err != nil {
				return n, false, err
			}
			if !valid {
				r.finished[v] = true
			} else {
				still = append(still, v)
			}
		}
		unfinished = still
	}
	return n, len(unfinished) == 0, nil
}

func prefixOf(key []byte) []byte { return key[:keys.Split(key)] }

// compare checks that the raw MV holds exactly the upstream's live rows.
func (r *rawRun) compare() error {
	live := func(table uint32) (*pebble.Iterator, error) {
		lo, hi := keys.TableSpan(table)
		return r.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	}
	up, err := live(UpstreamTable)
	if err != nil {
		return err
	}
	defer up.Close()
	mv, err := live(MVTable)
	if err != nil {
		return err
	}
	defer mv.Close()
	step := func(it *pebble.Iterator, valid bool) bool {
		for valid && it.Key()[len(it.Key())-2] != keys.KindPut {
			valid = it.NextPrefix()
		}
		return valid
	}
	okU, okM := step(up, up.First()), step(mv, mv.First())
	rows := 0
	for okU || okM {
		if !okU || !okM {
			return errors.Newf("bench: raw MV and upstream differ in length after %d rows", rows)
		}
		ku, km := prefixOf(up.Key())[4:], prefixOf(mv.Key())[4:]
		if !bytes.Equal(ku, km) || !bytes.Equal(up.Value(), mv.Value()) {
			return errors.Newf("bench: raw MV differs from upstream at row %d (%x vs %x)", rows, ku, km)
		}
		rows++
		okU, okM = step(up, up.NextPrefix()), step(mv, mv.NextPrefix())
	}
	return errors.CombineErrors(up.Error(), mv.Error())
}
