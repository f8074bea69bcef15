package backfill_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// snapshotPartsParams is partsParams with the churn during the backfill
// doubled, so that the parts' log stores hold a good share of the
// snapshot's rows when their snapshot phases end.
func snapshotPartsParams(t *testing.T) workload.Params {
	p := partsParams(t)
	p.UpdateDuring *= 2
	p.DeleteDuring *= 2
	p.InsertDuring *= 2
	return p
}

// scanLog counts the changes a store's log store holds in a set of vnodes
// at the committed epoch, by a scan (each vnode's account row, pk
// (vnode, 0, 0), left out: docs/format.md).
func scanLog(t *testing.T, s *lsm.Store, vnodes *roaring.Bitmap) int64 {
	t.Helper()
	var n int64
	for it := vnodes.Iterator(); it.HasNext(); {
		v := uint16(it.Next())
		lo := keys.AppendUint64(keys.AppendUint64(keys.AppendUint64(nil, uint64(v)), 1), 0)
		li, err := s.NewIter(partLog, v, lo, nil)
		require.NoError(t, err)
		for ok := li.First(); ok; ok = li.Next() {
			n++
		}
		require.NoError(t, li.Close())
	}
	return n
}

// snapshotSums are the sums over the parts of one checkpoint: their stats
// figures' raw consumed and total rows, the truth in rows, and the log
// rows consumed and pending.
type snapshotSums struct {
	consumed, total         float64
	behind, all             int64
	logConsumed, logPending int64
}

// checkSnapshotParts checks one checkpoint's records of the parts of a
// snapshot backfill (their stores committed the same epoch) against
// scans of their stores, and returns their sums. Each part's stats figure
// must be its phase-aware truth exactly: consumed = its snapshot rows read
// (while unfinished vnodes remain, a scan at the pinned epoch below their
// cursors) + its log rows consumed; total = its vnodes' live rows at the
// snapshot epoch (a scan there while pinned; once every vnode is read, the
// rows read) + its log rows consumed + the changes its log store holds in
// its vnodes (a scan). So Σ consumed / Σ total over the parts is the
// job's figure, exactly.
func checkSnapshotParts(t *testing.T, parts []*jobPart, recs []backfill.Record) snapshotSums {
	t.Helper()
	var sum snapshotSums
	seen := roaring.New()
	for i, r := range recs {
		jp := parts[i]
		require.Equal(t, recs[0].Epoch, r.Epoch, "the parts commit the same epochs")
		require.Equal(t, recs[0].SnapshotEpoch, r.SnapshotEpoch, "the parts read the same snapshot")
		pending := scanLog(t, jp.s, jp.vnodes)
		require.Equal(t, uint64(pending), r.LogPending, "part %s: log rows pending, statistics vs a scan", jp.name)
		var read uint64
		unfinished := false
		for _, v := range r.Vnodes {
			require.False(t, seen.Contains(uint32(v.Vnode)), "vnode %d in two parts", v.Vnode)
			seen.Add(uint32(v.Vnode))
			read += v.RowCount
			unfinished = unfinished || !v.Finished
		}
		var snapRows int64
		for _, n := range r.SnapshotTotals {
			snapRows += n
		}
		behind := int64(read)
		if unfinished {
			require.Equal(t, "snapshot", r.Phase, "part %s: vnodes unread after the snapshot phase", jp.name)
			o := backfilltest.ScanOracle{Store: jp.s, Table: partUpstream}
			var scanned, below int64
			for _, v := range r.Vnodes {
				b, n, err := o.Rows(r.SnapshotEpoch, v.Vnode, v.Cursor)
				require.NoError(t, err)
				scanned += n
				switch {
				case v.Finished:
					below += n
				case v.Cursor != nil:
					below += b
				}
			}
			require.Equal(t, scanned, snapRows, "part %s: the snapshot's live rows, accounts vs a scan at the snapshot epoch", jp.name)
			require.Equal(t, below, behind, "part %s: the snapshot rows read vs a scan below the cursors", jp.name)
		} else {
			require.Equal(t, snapRows, behind, "part %s: a snapshot read whole: its rows read are its live rows", jp.name)
		}
		b, all := behind+int64(r.LogConsumed), snapRows+int64(r.LogConsumed)+pending
		f := r.Figure("stats")
		require.Equal(t, float64(b), f.Consumed, "part %s (%s): stats consumed", jp.name, r.Phase)
		require.Equal(t, float64(all), f.Total, "part %s (%s): stats total", jp.name, r.Phase)
		want := 100.0
		if all > 0 {
			want = 100 * float64(b) / float64(all)
		}
		require.InDelta(t, want, r.Truth, 1e-9, "part %s: backfilltest.Truth", jp.name)
		sum.consumed, sum.total = sum.consumed+f.Consumed, sum.total+f.Total
		sum.behind, sum.all = sum.behind+b, sum.all+all
		sum.logConsumed, sum.logPending = sum.logConsumed+int64(r.LogConsumed), sum.logPending+pending
	}
	require.Equal(t, float64(sum.behind), sum.consumed, "Σ consumed = the job's rows behind")
	require.Equal(t, float64(sum.all), sum.total, "Σ total = the job's rows")
	return sum
}

// snapshotRun gathers what the parts of a snapshot backfill did.
type snapshotRun struct {
	phases      map[string][]string // by part, in order, repeats dropped
	ckpts       int
	maxPending  int64 // Σ log rows pending, at most
	lastSums    snapshotSums
	lastRecords []backfill.Record
}

func (sr *snapshotRun) add(t *testing.T, recs []backfill.Record, parts []*jobPart, sums snapshotSums) {
	if sr.phases == nil {
		sr.phases = map[string][]string{}
	}
	for i, r := range recs {
		ph := sr.phases[parts[i].name]
		if len(ph) == 0 || ph[len(ph)-1] != r.Phase {
			sr.phases[parts[i].name] = append(ph, r.Phase)
		}
		require.Equal(t, r.Phase == "joined", r.Finished, "part %s: finished only once joined", parts[i].name)
	}
	sr.ckpts++
	sr.maxPending = max(sr.maxPending, sums.logPending)
	sr.lastSums, sr.lastRecords = sums, recs
}

// runSnapshotParts steps the parts of a snapshot backfill in lockstep,
// checking each checkpoint (checkSnapshotParts), until every one finished
// and two more steps ran, or until stop (if set) returns true after a
// checkpoint.
func runSnapshotParts(t *testing.T, parts []*jobPart, sr *snapshotRun, stop func(recs []backfill.Record) bool) {
	t.Helper()
	tail := 0
	for tail < 2 {
		recs, ok := stepParts(t, parts)
		if ok {
			sr.add(t, recs, parts, checkSnapshotParts(t, parts, recs))
			if stop != nil && stop(recs) {
				return
			}
		}
		done := true
		for _, jp := range parts {
			done = done && jp.j.Finished()
		}
		if done {
			tail++
		}
	}
}

// finishSnapshotParts checks the parts' end: each finished (joined), its
// MV equal to its vnodes of the upstream (Compare), the MVs together the
// whole table, and each store's statistics, per vnode, equal to a scan
// (Verify).
func finishSnapshotParts(t *testing.T, parts []*jobPart, sr *snapshotRun) {
	t.Helper()
	for _, jp := range parts {
		require.True(t, jp.j.Finished(), "part %s finished", jp.name)
		require.True(t, jp.last.Finished)
		require.Equal(t, "joined", jp.last.Phase, "part %s", jp.name)
		require.NoError(t, jp.j.Compare(), "part %s", jp.name)
		require.NoError(t, jp.j.Close())
	}
	checkUnion(t, parts[0].src.G, parts)
	for _, jp := range parts {
		require.Zero(t, scanLog(t, jp.s, jp.vnodes), "part %s: its log store consumed", jp.name)
		rep, err := jp.s.Verify()
		require.NoError(t, err)
		require.True(t, rep.OK(), "part %s: Verify: %v", jp.name, rep.Differences)
	}
	require.Positive(t, sr.maxPending, "the log stores held changes")
	require.Positive(t, sr.lastSums.logConsumed, "the parts consumed their log stores")
	t.Logf("%d checkpoints; phases %v; Σ log rows pending at most %d, consumed %d", sr.ckpts, sr.phases, sr.maxPending, sr.lastSums.logConsumed)
}

// openSnapshotParts opens the two parts A and B of a snapshot backfill
// over vnode sets va and vb, on stores opened with opts.
func openSnapshotParts(t *testing.T, p workload.Params, parts []*jobPart, va, vb *roaring.Bitmap, opts func() *lsm.Options) {
	for _, jp := range parts {
		jp.mode = backfill.ModeSnapshot
		s, err := lsm.Open(t.TempDir(), opts())
		require.NoError(t, err)
		jp.s = s
		t.Cleanup(func() { require.NoError(t, s.Close()) })
	}
	parts[0].open(t, p, genjob.NewPart(newGenerator(t, p), va), va)
	parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), vb), vb)
}

// TestSnapshotParts splits a snapshot backfill over two stores on local
// disk, each part over half the vnodes with its own log store of their
// changes, stepping in lockstep. At every checkpoint each part's stats
// figure is its phase-aware truth exactly (scans of its store), so the
// sums over the parts are the job's; both go through the three phases,
// finish, each MV equals its half of the upstream, and both stores'
// statistics verify clean.
func TestSnapshotParts(t *testing.T) {
	p := snapshotPartsParams(t)
	parts := []*jobPart{{name: "A"}, {name: "B"}}
	va, vb := halves(p.VnodeCount)
	openSnapshotParts(t, p, parts, va, vb, func() *lsm.Options { return &lsm.Options{Logger: lsm.QuietLogger(nil)} })
	sr := &snapshotRun{}
	runSnapshotParts(t, parts, sr, nil)
	finishSnapshotParts(t, parts, sr)
	for _, jp := range parts {
		require.Equal(t, []string{"snapshot", "log store", "joined"}, sr.phases[jp.name], "part %s", jp.name)
	}
}

// moveSnapshotRange closes the parts' jobs, moves vnodes [lo, hi) of every
// table of the job (the upstream, the MV, the state table and the log
// store) from part from to part to, and reopens both with their new sets
// (from's generator kept, to's a new one replayed to the committed step,
// as a new process would). The moved vnodes' pending changes and accounts
// move with them: to's log store holds the range's changes that from's
// held, from's none, and the sums over the parts (the figure, the log rows
// consumed and pending) are the same before and after. It returns the
// reopened parts' first records.
func moveSnapshotRange(t *testing.T, p workload.Params, parts []*jobPart, sr *snapshotRun, from, to *jobPart, lo, hi int) []backfill.Record {
	t.Helper()
	rng := roaring.New()
	rng.AddRange(uint64(lo), uint64(hi))
	require.True(t, from.vnodes.Contains(uint32(lo)) && from.vnodes.Contains(uint32(hi-1)), "part %s owns the range", from.name)
	before := sr.lastSums
	movedPending := scanLog(t, from.s, rng)
	phases := map[string]string{}
	for i, jp := range parts {
		phases[jp.name] = sr.lastRecords[i].Phase
		require.NoError(t, jp.j.Close())
	}
	for _, table := range []uint32{partUpstream, partMV, partState, partLog} {
		ms, err := from.s.MoveVnodes(context.Background(), to.s, table, lo, hi)
		require.NoError(t, err, "move of table %d", table)
		t.Logf("table %d: vnodes [%d, %d) moved from %s to %s: %d shared SSTs by reference, %d versions copied, %d live rows",
			table, lo, hi, from.name, to.name, ms.SharedSSTs, ms.CopiedVersions, ms.LiveRows)
	}
	require.Zero(t, scanLog(t, from.s, rng), "%s's log store holds none of the moved range", from.name)
	require.Equal(t, movedPending, scanLog(t, to.s, rng), "%s's log store holds the moved range's pending changes", to.name)
	nf, nt := from.vnodes.Clone(), to.vnodes.Clone()
	nf.AndNot(rng)
	nt.Or(rng)
	from.open(t, p, from.src, nf) // the same generator: no replay
	to.open(t, p, genjob.NewPart(newGenerator(t, p), nt), nt)
	var inits []backfill.Record
	for _, jp := range parts {
		init := jp.j.Initial()
		require.NotNil(t, init, "part %s", jp.name)
		require.Len(t, init.Vnodes, int(jp.vnodes.GetCardinality()), "part %s", jp.name)
		jp.last = *init
		inits = append(inits, *init)
	}
	after := checkSnapshotParts(t, parts, inits)
	require.Equal(t, before, after, "the sums over the parts before and after the move")
	t.Logf("moved at Σ %.0f/%.0f rows, log %d consumed %d pending (%d of them in the moved range); phases %v before, after %s %s, %s %s",
		before.consumed, before.total, before.logConsumed, before.logPending, movedPending, phases,
		parts[0].name, inits[0].Phase, parts[1].name, inits[1].Phase)
	return inits
}

// TestSnapshotPartsMove runs a snapshot backfill's parts on two stores of
// one bucket of the shared S3 server, A over vnodes [0, 16) reading 10
// times as many rows per barrier as B over [16, 64), so that A's phases
// run ahead of B's, and moves vnode ranges of every table of the job (the
// upstream, the MV, the state table and the log store) from B to A
// (moveSnapshotRange) twice:
//
//   - in B's snapshot phase, A past its own, 8 vnodes (or those up to
//     64) from the one B's second actor is reading, with the changes B
//     logged of them: A goes back to the snapshot phase (the snapshot
//     epoch pinned again) to read them, the first from its cursor;
//   - in B's log-store phase, with changes of vnodes [16, 24) consumed
//     and others still in B's log store: A, joined meanwhile, goes back
//     to the log-store phase, the moved changes ahead of its own.
//
// Both parts finish with MV = upstream and their stores' statistics, per
// vnode, verify clean.
func TestSnapshotPartsMove(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := fmt.Sprintf("s3://%s/cluster?endpoint=%s&retry-for=30s", srv.NewBucket(t), srv.Endpoint)
	p := snapshotPartsParams(t)
	vc := p.VnodeCount
	va, vb := roaring.New(), roaring.New()
	va.AddRange(0, uint64(vc/4))
	vb.AddRange(uint64(vc/4), uint64(vc))
	parts := []*jobPart{{name: "A", barrierRows: max(160, p.Rows/40)}, {name: "B"}}
	openSnapshotParts(t, p, parts, va, vb, func() *lsm.Options {
		return &lsm.Options{Logger: lsm.QuietLogger(nil), ObjectStore: &objstore.StoreOptions{URL: url}}
	})
	a, b := parts[0], parts[1]
	in := func(lo, hi int) *roaring.Bitmap {
		rng := roaring.New()
		rng.AddRange(uint64(lo), uint64(hi))
		return rng
	}
	sr := &snapshotRun{}

	// In B's snapshot phase, A past its own: the range from the vnode B's
	// second actor is reading (over [40, 64)).
	var lo, hi int
	runSnapshotParts(t, parts, sr, func(recs []backfill.Record) bool {
		if recs[0].Phase == "snapshot" || recs[1].Phase != "snapshot" {
			return false
		}
		for _, v := range recs[1].Vnodes {
			if int(v.Vnode) >= 5*vc/8 && int(v.Vnode)+4 <= vc && v.Cursor != nil && !v.Finished {
				lo, hi = int(v.Vnode), min(vc, int(v.Vnode)+8)
				return scanLog(t, b.s, in(lo, hi)) > 0
			}
		}
		return false
	})
	require.Equal(t, "snapshot", b.last.Phase, "B is in its snapshot phase at the first move")
	require.NotZero(t, hi, "B's second actor read a vnode of its range in its snapshot phase")
	inits := moveSnapshotRange(t, p, parts, sr, b, a, lo, hi)
	require.Equal(t, "snapshot", inits[0].Phase, "vnodes not read yet take a part back to the snapshot phase")

	// In B's log-store phase.
	lo, hi = vc/4, 3*vc/8
	runSnapshotParts(t, parts, sr, func(recs []backfill.Record) bool {
		return recs[0].Phase == "joined" && recs[1].Phase == "log store" && recs[1].LogConsumed > 0 && scanLog(t, b.s, in(lo, hi)) > 0
	})
	require.Equal(t, "log store", b.last.Phase, "B is in its log-store phase at the second move")
	inits = moveSnapshotRange(t, p, parts, sr, b, a, lo, hi)
	require.Equal(t, "log store", inits[0].Phase, "vnodes with changes to consume take a joined part back to the log-store phase")
	require.False(t, inits[0].Finished)

	runSnapshotParts(t, parts, sr, nil)
	finishSnapshotParts(t, parts, sr)
}

// TestSnapshotPartsBadInput: a snapshot backfill's part reopened over a
// vnode no part owned when it started (without an account row in the log
// store) is refused naming the vnode; a log store of the layout before it
// was partitioned by vnode, and a started job whose job row is of that
// version (3), are refused with ErrOldLogStore.
func TestSnapshotPartsBadInput(t *testing.T) {
	p := snapshotPartsParams(t)
	va, _ := halves(p.VnodeCount)
	newStore := func() *lsm.Store {
		s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		return s
	}
	cfg := func(s *lsm.Store, vnodes *roaring.Bitmap) backfill.JobConfig {
		return backfill.JobConfig{Store: s, Upstream: p.TableDef(partUpstream), MV: partMV, State: partState, Meta: partMeta,
			Mode: backfill.ModeSnapshot, LogStore: partLog, Vnodes: vnodes, Actors: 2, BarrierRows: 100,
			Source: genjob.NewPart(newGenerator(t, p), vnodes)}
	}
	// started runs a part over va until its backfill started and
	// checkpointed, and closes it.
	started := func(s *lsm.Store) {
		j, err := backfill.OpenJob(cfg(s, va))
		require.NoError(t, err)
		for {
			_, ok, err := j.Step(context.Background())
			require.NoError(t, err)
			if ok {
				break
			}
		}
		require.NoError(t, j.Close())
	}

	t.Run("vnode without account", func(t *testing.T) {
		s := newStore()
		started(s)
		more := va.Clone()
		more.Add(uint32(p.VnodeCount - 1))
		j, err := backfill.OpenJob(cfg(s, more))
		require.Nil(t, j)
		require.ErrorContains(t, err, fmt.Sprintf("vnode %d has no account row in its log store (table %d)", p.VnodeCount-1, partLog))
	})

	t.Run("old log store", func(t *testing.T) {
		s := newStore()
		require.NoError(t, s.CreateTable(lsm.TableDef{ID: partLog, Name: "log_store", VnodeCount: 1, PK: keys.Schema{keys.Uint64, keys.Uint64}}))
		j, err := backfill.OpenJob(cfg(s, va))
		require.Nil(t, j)
		require.ErrorIs(t, err, backfill.ErrOldLogStore)
		require.ErrorContains(t, err, "table 5 (1 vnode, pk (epoch, sequence))")
	})

	t.Run("old job row", func(t *testing.T) {
		s := newStore()
		started(s)
		pk := keys.AppendUint64(nil, 1)
		row, ok, err := s.Get(partMeta, 0, pk)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, byte(5), row[0], "the job row's version")
		old := bytes.Clone(row)
		// Version 5 ends with the ETA's four background figures
		// (docs/format.md): without them the row has version 3's layout.
		row = row[:len(row)-32]
		row[0] = 3
		w, err := s.NewWriter(partMeta, nil, nil)
		require.NoError(t, err)
		e := s.EpochFloor() + 1
		require.NoError(t, w.Update(e, 0, pk, old, row))
		require.NoError(t, w.Seal(e))
		require.NoError(t, w.Close())
		require.NoError(t, s.Commit(e))
		j, err := backfill.OpenJob(cfg(s, va))
		require.Nil(t, j)
		require.ErrorIs(t, err, backfill.ErrOldLogStore)
		require.ErrorContains(t, err, "job row of version 3")
	})
}
