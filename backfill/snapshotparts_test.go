package backfill_test

import (
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

// openSnapshotParts opens the two parts of a snapshot backfill over the
// halves of the table's vnodes, on stores opened with opts.
func openSnapshotParts(t *testing.T, p workload.Params, opts func() *lsm.Options) []*jobPart {
	va, vb := halves(p.VnodeCount)
	parts := []*jobPart{{name: "A", mode: backfill.ModeSnapshot}, {name: "B", mode: backfill.ModeSnapshot}}
	for _, jp := range parts {
		s, err := lsm.Open(t.TempDir(), opts())
		require.NoError(t, err)
		jp.s = s
		t.Cleanup(func() { require.NoError(t, s.Close()) })
	}
	parts[0].open(t, p, genjob.NewPart(newGenerator(t, p), va), va)
	parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), vb), vb)
	return parts
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
	parts := openSnapshotParts(t, p, func() *lsm.Options { return &lsm.Options{Logger: lsm.QuietLogger(nil)} })
	sr := &snapshotRun{}
	runSnapshotParts(t, parts, sr, nil)
	finishSnapshotParts(t, parts, sr)
	for _, jp := range parts {
		require.Equal(t, []string{"snapshot", "log store", "joined"}, sr.phases[jp.name], "part %s", jp.name)
	}
}

// TestSnapshotPartsMove runs the parts of TestSnapshotParts on two stores
// of one bucket of the shared S3 server and, once both read their
// snapshots and A is consuming its log store with changes still in it in
// vnodes [16, 32), moves that range of every table of the job (the
// upstream, the MV, the state table and the log store) from A to B, the
// jobs closed meanwhile, then reopens A over [0, 16) and B over [16, 64).
// The moved vnodes' pending changes and accounts move with them: the sums
// over the parts are the same before and after the move (the figure, the
// log rows consumed and pending), B's log store holds the moved range's
// pending changes, and both parts finish with MV = upstream and their
// stores' statistics verify clean.
func TestSnapshotPartsMove(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := fmt.Sprintf("s3://%s/cluster?endpoint=%s&retry-for=30s", srv.NewBucket(t), srv.Endpoint)
	p := snapshotPartsParams(t)
	parts := openSnapshotParts(t, p, func() *lsm.Options {
		return &lsm.Options{Logger: lsm.QuietLogger(nil), ObjectStore: &objstore.StoreOptions{URL: url}}
	})
	lo, hi := p.VnodeCount/4, p.VnodeCount/2
	moved := roaring.New()
	moved.AddRange(uint64(lo), uint64(hi))
	sr := &snapshotRun{}
	runSnapshotParts(t, parts, sr, func(recs []backfill.Record) bool {
		return recs[0].Phase == "log store" && recs[1].Phase != "snapshot" && recs[0].LogConsumed > 0 &&
			scanLog(t, parts[0].s, moved) > 0
	})
	require.Equal(t, "log store", parts[0].last.Phase, "A is in its log-store phase at the move")
	before := sr.lastSums
	movedPending := scanLog(t, parts[0].s, moved)
	for _, jp := range parts {
		require.NoError(t, jp.j.Close())
	}
	for _, table := range []uint32{partUpstream, partMV, partState, partLog} {
		ms, err := parts[0].s.MoveVnodes(context.Background(), parts[1].s, table, lo, hi)
		require.NoError(t, err, "move of table %d", table)
		t.Logf("table %d: vnodes [%d, %d) moved: %d shared SSTs by reference, %d versions copied, %d live rows", table, lo, hi,
			ms.SharedSSTs, ms.CopiedVersions, ms.LiveRows)
	}
	require.Zero(t, scanLog(t, parts[0].s, moved), "A's log store holds none of the moved range")
	require.Equal(t, movedPending, scanLog(t, parts[1].s, moved), "B's log store holds the moved range's pending changes")
	_, vb := halves(p.VnodeCount)
	na, nb := roaring.New(), vb.Clone()
	na.AddRange(0, uint64(lo))
	nb.Or(moved)
	parts[0].open(t, p, parts[0].src, na) // the same generator: no replay
	parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), nb), nb)
	var inits []backfill.Record
	for _, jp := range parts {
		init := jp.j.Initial()
		require.NotNil(t, init, "part %s", jp.name)
		jp.last = *init
		inits = append(inits, *init)
	}
	require.Len(t, inits[1].Vnodes, int(nb.GetCardinality()))
	after := checkSnapshotParts(t, parts, inits)
	require.Equal(t, before, after, "the sums over the parts before and after the move")
	t.Logf("moved at Σ %.0f/%.0f rows, log %d consumed %d pending (%d of them in the moved range); phases after: A %s, B %s",
		before.consumed, before.total, before.logConsumed, before.logPending, movedPending, inits[0].Phase, inits[1].Phase)
	runSnapshotParts(t, parts, sr, nil)
	finishSnapshotParts(t, parts, sr)
}
