package backfill_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/backfill/backfilltest"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// The tables of a job part's store: the upstream, the MV, the state table,
// the job's metadata and a snapshot backfill's log store, the same ids on
// every store (a move keeps them).
const (
	partUpstream, partMV, partState, partMeta, partLog = 1, 2, 3, 4, 5
)

// partsParams is the workload the parts' tests split over two stores:
// churn before and during the backfill, 64 vnodes.
func partsParams(t *testing.T) workload.Params {
	rows := canonicalRows / 5 // 40,000 rows; 4,000 under the race detector
	p, err := workload.Preset("mixed", rows, 64, testSeed(t))
	require.NoError(t, err)
	p.BatchRows, p.DuringSteps = rows/4, 30
	return p
}

// jobPart is one store and the part of the job over its vnodes.
type jobPart struct {
	name   string
	s      *lsm.Store
	j      *backfill.Job
	src    *genjob.Part
	vnodes *roaring.Bitmap
	last   backfill.Record
	// mode is the job's: a snapshot backfill's part has its log store
	// (partLog) and its truth from scans of its store. barrierRows, if
	// set, is its JobConfig.BarrierRows.
	mode        backfill.JobMode
	barrierRows int
}

// openPart opens the job part over vnodes on the part's store with src as
// its upstream.
func (jp *jobPart) open(t *testing.T, p workload.Params, src *genjob.Part, vnodes *roaring.Bitmap) {
	t.Helper()
	jp.src, jp.vnodes = src, vnodes.Clone()
	src.SetVnodes(vnodes)
	cfg := backfill.JobConfig{
		Store: jp.s, Upstream: p.TableDef(partUpstream), MV: partMV, State: partState, Meta: partMeta,
		Vnodes: vnodes, Actors: 2, ChunkSize: 64, BarrierRows: max(16, p.Rows/400),
		Source: src, Score: backfilltest.Oracles(src.Oracle()),
	}
	if jp.barrierRows > 0 {
		cfg.BarrierRows = jp.barrierRows
	}
	if jp.mode == backfill.ModeSnapshot {
		// The snapshot's truth is at its pinned epoch: a scan of the store.
		cfg.Mode, cfg.LogStore = backfill.ModeSnapshot, partLog
		cfg.Score = backfilltest.Truth{Oracles: []backfilltest.Oracle{backfilltest.ScanOracle{Store: jp.s, Table: partUpstream}},
			Store: jp.s, LogStore: partLog}.Score
	}
	j, err := backfill.OpenJob(cfg)
	require.NoError(t, err, "part %s", jp.name)
	jp.j = j
}

// partsAccuracy gathers the error of the parts' summed stats figure.
type partsAccuracy struct {
	n            int
	sumPP, maxPP float64
	widthPP      float64
}

// checkParts checks the records of one checkpoint of every part (the
// same epoch's, the parts stepping in lockstep): the sums of their stats
// figures against the truth over all their vnodes from the whole table's
// model (whole): Σ total equals the live rows, Σ bounds hold the rows
// behind the cursors, and the error is gathered. allVnodes says the parts
// own every vnode of the table between them.
func checkParts(t *testing.T, whole backfilltest.Oracle, recs []backfill.Record, vnodeCount int, allVnodes bool, acc *partsAccuracy) {
	t.Helper()
	seen := roaring.New()
	var behind, total int64
	var consumed, tot, lo, hi float64
	for i, r := range recs {
		require.Equal(t, recs[0].Epoch, r.Epoch, "the parts commit the same epochs")
		for _, v := range r.Vnodes {
			require.False(t, seen.Contains(uint32(v.Vnode)), "vnode %d in two parts", v.Vnode)
			seen.Add(uint32(v.Vnode))
			b, n, err := whole.Rows(r.Epoch, v.Vnode, v.Cursor)
			require.NoError(t, err)
			total += n
			switch {
			case v.Finished:
				behind += n
			case v.Cursor != nil:
				behind += b
			}
		}
		f := r.Figure("stats")
		require.NotNil(t, f.Bounds, "part %d: stats bounds", i)
		consumed, tot, lo, hi = consumed+f.Consumed, tot+f.Total, lo+f.Bounds.LowerRows, hi+f.Bounds.UpperRows
		require.InDelta(t, f.Bounds.Lower, 100*f.Bounds.LowerRows/max(f.Total, 1), 1e-9, "part %d: bounds in rows and percent", i)
	}
	if allVnodes {
		require.Equal(t, uint64(vnodeCount), seen.GetCardinality(), "the parts own every vnode")
	}
	require.Equal(t, float64(total), tot, "Σ stats totals = the live rows of the parts' vnodes")
	require.LessOrEqual(t, lo, float64(behind)+1e-6, "Σ lower bounds hold the truth")
	require.GreaterOrEqual(t, hi, float64(behind)-1e-6, "Σ upper bounds hold the truth")
	truth, fig := 100.0, 100.0
	if total > 0 {
		truth, fig = 100*float64(behind)/float64(total), 100*consumed/tot
	}
	e := math.Abs(fig - truth)
	acc.n++
	acc.sumPP += e
	acc.maxPP = max(acc.maxPP, e)
	if tot > 0 {
		acc.widthPP = max(acc.widthPP, 100*(hi-lo)/tot)
	}
}

// stepParts steps every part once, in lockstep, and returns their records
// when the step was a checkpoint of the backfill (of every part, or none).
func stepParts(t *testing.T, parts []*jobPart) ([]backfill.Record, bool) {
	t.Helper()
	var recs []backfill.Record
	var oks int
	for _, jp := range parts {
		r, ok, err := jp.j.Step(context.Background())
		require.NoError(t, err, "part %s", jp.name)
		if ok {
			oks++
			jp.last = r
			recs = append(recs, r)
		}
	}
	require.Contains(t, []int{0, len(parts)}, oks, "the parts checkpoint together")
	return recs, oks > 0
}

// runParts steps the parts in lockstep until every one finished and two
// more steps ran, or until stop (if set) returns true after a checkpoint,
// checking each checkpoint (checkParts).
func runParts(t *testing.T, p workload.Params, parts []*jobPart, allVnodes bool, acc *partsAccuracy, stop func(truth float64) bool) {
	t.Helper()
	tail := 0
	for tail < 2 {
		recs, ok := stepParts(t, parts)
		if ok {
			checkParts(t, genjob.Oracle{G: parts[0].src.G}, recs, p.VnodeCount, allVnodes, acc)
			if stop != nil {
				var behind, total float64
				for _, r := range recs {
					f := r.Figure("stats")
					behind, total = behind+f.Consumed, total+f.Total
				}
				if stop(100 * behind / max(total, 1)) {
					return
				}
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

// checkUnion checks that the parts' MVs together are the whole upstream
// table of the model: each vnode's MV rows on the store of the part that
// owns it equal the model's rows, and no other store holds MV rows of it.
func checkUnion(t *testing.T, g *workload.Generator, parts []*jobPart) {
	t.Helper()
	snaps := make([]*lsm.Snapshot, len(parts))
	for i, jp := range parts {
		s, err := jp.s.Snapshot()
		require.NoError(t, err)
		defer s.Close()
		snaps[i] = s
	}
	for v := range g.Params().VnodeCount {
		var want [][2][]byte
		g.EachRow(uint16(v), func(pk, row []byte) { want = append(want, [2][]byte{pk, row}) })
		owners := 0
		for i, jp := range parts {
			it, err := snaps[i].NewIter(partMV, uint16(v), nil, nil)
			require.NoError(t, err)
			var got [][2][]byte
			for ok := it.First(); ok; ok = it.Next() {
				got = append(got, [2][]byte{bytes.Clone(it.PK()), bytes.Clone(it.Row())})
			}
			require.NoError(t, it.Close())
			if !jp.vnodes.Contains(uint32(v)) {
				require.Empty(t, got, "part %s holds MV rows of vnode %d, which it does not own", jp.name, v)
				continue
			}
			owners++
			require.Equal(t, len(want), len(got), "part %s: MV rows of vnode %d", jp.name, v)
			for k := range want {
				require.True(t, bytes.Equal(want[k][0], got[k][0]) && bytes.Equal(want[k][1], got[k][1]),
					"part %s: MV row %d of vnode %d differs from the upstream's", jp.name, k, v)
			}
		}
		require.Equal(t, 1, owners, "vnode %d has one owner", v)
	}
}

func halves(vnodes int) (a, b *roaring.Bitmap) {
	a, b = roaring.New(), roaring.New()
	a.AddRange(0, uint64(vnodes/2))
	b.AddRange(uint64(vnodes/2), uint64(vnodes))
	return a, b
}

func newGenerator(t *testing.T, p workload.Params) *workload.Generator {
	g, err := workload.New(p)
	require.NoError(t, err)
	return g
}

// TestJobParts splits a table's vnodes over two stores on local disk, each
// with the part of the job over its half and the part of the same
// generator's workload on its half as its upstream, stepping in lockstep
// as a coordinator's barriers make them. At every checkpoint the sums of
// the two parts' stats figures are held to the truth over all the vnodes
// (the whole table's model): Σ totals equal to the live rows, Σ bounds
// around the rows behind the cursors, the error of Σ consumed / Σ total
// within the canonical runs' bounds. Both finish, each MV equals its half
// of the upstream (Compare), and the two MVs together are the whole table.
//
// Its "drop" run reopens part A, mid-backfill, over half its vnodes, with
// a new generator (as a new process would: the part replays it to the
// committed step); the vnodes it keeps resume from their state rows, the
// others are no one's, and both parts still end with MV = upstream.
func TestJobParts(t *testing.T) {
	for _, drop := range []bool{false, true} {
		t.Run(fmt.Sprintf("drop=%v", drop), func(t *testing.T) {
			p := partsParams(t)
			va, vb := halves(p.VnodeCount)
			parts := []*jobPart{{name: "A"}, {name: "B"}}
			for _, jp := range parts {
				s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
				require.NoError(t, err)
				jp.s = s
				defer func() { require.NoError(t, s.Close()) }()
			}
			parts[0].open(t, p, genjob.NewPart(newGenerator(t, p), va), va)
			parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), vb), vb)
			acc := &partsAccuracy{}
			if drop {
				runParts(t, p, parts, true, acc, func(truth float64) bool { return truth >= 40 })
				a := parts[0]
				before := a.last
				require.NoError(t, a.j.Close())
				kept := roaring.New()
				kept.AddRange(0, uint64(p.VnodeCount/4))
				g := newGenerator(t, p)
				a.open(t, p, genjob.NewPart(g, kept), kept)
				require.Equal(t, before.Step, g.Step(), "the new generator replayed to the committed step")
				init := a.j.Initial()
				require.NotNil(t, init)
				require.Len(t, init.Vnodes, int(kept.GetCardinality()))
				for i, v := range init.Vnodes {
					require.Equal(t, before.Vnodes[i].String(), v.String(), "vnode %d resumed from its state row", v.Vnode)
				}
				// RowCount's total is the kept vnodes' key count, not the
				// store's whole upstream table's.
				st := a.s.Stats()
				rc := init.Figure("rowcount")
				require.Equal(t, float64(st.Physical.Sum(partUpstream, kept).Entries), rc.Total)
				require.Less(t, rc.Total, float64(st.Physical.Table(partUpstream).TotalKeyCount))
			}
			runParts(t, p, parts, !drop, acc, nil)
			for _, jp := range parts {
				require.True(t, jp.j.Finished(), "part %s finished", jp.name)
				require.True(t, jp.last.Finished)
				require.NoError(t, jp.j.Compare(), "part %s", jp.name)
				require.NoError(t, jp.j.Close())
			}
			if !drop {
				checkUnion(t, parts[0].src.G, parts)
			}
			mean := acc.sumPP / float64(acc.n)
			t.Logf("%d checkpoints: Σ stats figure vs truth mean %.3f max %.3f pp, Σ bounds up to %.3f pp wide", acc.n, mean, acc.maxPP, acc.widthPP)
			require.Greater(t, acc.n, 10, "checkpoints")
			require.LessOrEqual(t, mean, 0.5, "mean error of the summed stats figure")
			require.LessOrEqual(t, acc.maxPP, 2.0, "max error of the summed stats figure")
		})
	}
}

// TestJobPartsMove runs the two parts of TestJobParts on two stores of one
// bucket of the shared S3 server, and at a checkpoint near 40% moves
// vnodes [16, 32) of the upstream, the MV and the state table from A to B
// (lsm.Store.MoveVnodes, the jobs closed meanwhile), then reopens A over
// [0, 16) and B over [16, 64): the moved vnodes resume on B from the state
// rows that moved with them, and both parts end with MV = upstream, the
// two MVs the whole table.
func TestJobPartsMove(t *testing.T) {
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	url := fmt.Sprintf("s3://%s/cluster?endpoint=%s&retry-for=30s", srv.NewBucket(t), srv.Endpoint)
	p := partsParams(t)
	va, vb := halves(p.VnodeCount)
	parts := []*jobPart{{name: "A"}, {name: "B"}}
	for _, jp := range parts {
		s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil), ObjectStore: &objstore.StoreOptions{URL: url}})
		require.NoError(t, err)
		jp.s = s
		defer func() { require.NoError(t, s.Close()) }()
	}
	parts[0].open(t, p, genjob.NewPart(newGenerator(t, p), va), va)
	parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), vb), vb)
	acc := &partsAccuracy{}
	runParts(t, p, parts, true, acc, func(truth float64) bool { return truth >= 40 })
	before := parts[0].last
	for _, jp := range parts {
		require.NoError(t, jp.j.Close())
	}
	lo, hi := p.VnodeCount/4, p.VnodeCount/2
	for _, table := range []uint32{partUpstream, partMV, partState} {
		ms, err := parts[0].s.MoveVnodes(context.Background(), parts[1].s, table, lo, hi)
		require.NoError(t, err, "move of table %d", table)
		t.Logf("table %d: vnodes [%d, %d) moved: %d shared SSTs by reference, %d versions copied, %d live rows", table, lo, hi,
			ms.SharedSSTs, ms.CopiedVersions, ms.LiveRows)
	}
	na, nb := roaring.New(), vb.Clone()
	na.AddRange(0, uint64(lo))
	nb.AddRange(uint64(lo), uint64(hi))
	parts[0].open(t, p, parts[0].src, na) // the same generator: no replay
	parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), nb), nb)
	require.Equal(t, before.Step, parts[1].src.G.Step(), "B's new generator replayed to the committed step")
	moved := map[uint16]string{}
	for _, v := range before.Vnodes {
		if int(v.Vnode) >= lo && int(v.Vnode) < hi {
			moved[v.Vnode] = v.String()
		}
	}
	init := parts[1].j.Initial()
	require.NotNil(t, init)
	require.Len(t, init.Vnodes, int(nb.GetCardinality()))
	started := 0
	for _, v := range init.Vnodes {
		if want, ok := moved[v.Vnode]; ok {
			require.Equal(t, want, v.String(), "moved vnode %d resumed on B from its state row", v.Vnode)
			if v.Started() {
				started++
			}
		}
	}
	require.Positive(t, started, "a moved vnode had started on A")
	require.False(t, init.Finished)
	checkParts(t, genjob.Oracle{G: parts[0].src.G}, []backfill.Record{*parts[0].j.Initial(), *init}, p.VnodeCount, true, acc)
	runParts(t, p, parts, true, acc, nil)
	for _, jp := range parts {
		require.True(t, jp.j.Finished(), "part %s finished", jp.name)
		require.NoError(t, jp.j.Compare(), "part %s", jp.name)
		require.NoError(t, jp.j.Close())
	}
	checkUnion(t, parts[0].src.G, parts)
	mean := acc.sumPP / float64(acc.n)
	t.Logf("%d checkpoints: Σ stats figure vs truth mean %.3f max %.3f pp, Σ bounds up to %.3f pp wide", acc.n, mean, acc.maxPP, acc.widthPP)
	require.LessOrEqual(t, mean, 0.5, "mean error of the summed stats figure")
	require.LessOrEqual(t, acc.maxPP, 2.0, "max error of the summed stats figure")
}

// TestJobPartsBadInput: a source op on a vnode the part does not own fails
// the step naming the vnode; JobConfig.Vnodes out of the table's range,
// empty, smaller than the actors, over upstreams of different vnode
// counts is refused at OpenJob.
func TestJobPartsBadInput(t *testing.T) {
	p := partsParams(t)
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	va, _ := halves(p.VnodeCount)
	cfg := func(vnodes *roaring.Bitmap) backfill.JobConfig {
		return backfill.JobConfig{Store: s, Upstream: p.TableDef(partUpstream), MV: partMV, State: partState, Meta: partMeta,
			Vnodes: vnodes, Actors: 2, Source: genjob.Source{G: newGenerator(t, p)}}
	}

	// The whole table's source under a part over half the vnodes.
	first := newGenerator(t, p).Next()
	var unowned uint16
	for _, op := range first {
		if !va.Contains(uint32(op.Vnode)) {
			unowned = op.Vnode
			break
		}
	}
	j, err := backfill.OpenJob(cfg(va))
	require.NoError(t, err)
	_, _, err = j.Step(context.Background())
	require.ErrorIs(t, err, backfill.ErrUnownedVnode)
	require.ErrorContains(t, err, fmt.Sprintf("in vnode %d of upstream 0", unowned))
	require.ErrorContains(t, err, "the job owns vnodes [0, 31]")
	require.NoError(t, j.Close())

	for _, c := range []struct {
		name   string
		vnodes *roaring.Bitmap
		mod    func(*backfill.JobConfig)
		want   string
		is     error
	}{
		{name: "out of range", vnodes: roaring.BitmapOf(3, uint32(p.VnodeCount)),
			want: fmt.Sprintf("JobConfig.Vnodes holds vnode %d, upstream table 1 has %d vnodes", p.VnodeCount, p.VnodeCount), is: lsm.ErrInvalidVnode},
		{name: "fewer than the actors", vnodes: roaring.BitmapOf(5), want: "2 actors for the 1 vnodes of JobConfig.Vnodes"},
		{name: "vnode counts", vnodes: va, mod: func(c *backfill.JobConfig) {
			other := p
			other.VnodeCount = 16
			c.Upstream, c.MV, c.State = lsm.TableDef{}, 0, 0
			c.Upstreams = []backfill.UpstreamConfig{{Table: p.TableDef(11), MV: 12, State: 13}, {Table: other.TableDef(21), MV: 22, State: 23}}
		}, want: "over upstream tables of different vnode counts: table 11 (upstream 0) has 64, table 21 (upstream 1) 16"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cf := cfg(c.vnodes)
			if c.mod != nil {
				c.mod(&cf)
			}
			j, err := backfill.OpenJob(cf)
			require.Error(t, err)
			require.Nil(t, j)
			require.ErrorContains(t, err, c.want)
			if c.is != nil {
				require.True(t, errors.Is(err, c.is), "%v is %v", err, c.is)
			}
		})
	}
}

// TestJobPartEmpty runs a part that owns no vnodes (a node holding none,
// until a move gives it some) in lockstep with one that owns them all: it
// checkpoints with the other at the same epochs (so that a move into it is
// possible at any checkpoint), its figures are 0 of 0, it is finished,
// and its store holds no rows of the upstream or the MV.
func TestJobPartEmpty(t *testing.T) {
	p := partsParams(t)
	all := roaring.New()
	all.AddRange(0, uint64(p.VnodeCount))
	parts := []*jobPart{{name: "all"}, {name: "none"}}
	for _, jp := range parts {
		s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
		require.NoError(t, err)
		jp.s = s
		defer func() { require.NoError(t, s.Close()) }()
	}
	parts[0].open(t, p, genjob.NewPart(newGenerator(t, p), all), all)
	parts[1].open(t, p, genjob.NewPart(newGenerator(t, p), roaring.New()), roaring.New())
	ckpts := 0
	for !parts[0].j.Finished() {
		recs, ok := stepParts(t, parts)
		require.Equal(t, parts[0].s.CommittedEpoch(), parts[1].s.CommittedEpoch(), "the empty part commits the same epochs")
		if !ok {
			continue
		}
		ckpts++
		require.Equal(t, recs[0].Epoch, recs[1].Epoch)
		require.Empty(t, recs[1].Vnodes)
		for _, f := range recs[1].Figures {
			require.Zero(t, f.Total, "approach %s", f.Approach)
			require.Zero(t, f.Consumed, "approach %s", f.Approach)
		}
		require.True(t, recs[1].Finished, "a part without vnodes is finished")
	}
	require.Greater(t, ckpts, 3)
	require.NoError(t, parts[1].j.Compare())
	st := parts[1].s.Stats()
	require.Zero(t, st.Live.Table(partUpstream).Rows, "the empty part's upstream rows")
	require.Zero(t, st.Live.Table(partMV).Rows, "the empty part's MV rows")
	for _, jp := range parts {
		require.NoError(t, jp.j.Close())
	}
}
