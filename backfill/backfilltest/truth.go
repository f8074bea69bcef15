package backfilltest

import (
	"context"
	"math"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
)

// Oracle knows the truth (docs/design.md §7, "The truth"): a Truth asks it
// at each checkpoint about the epoch the job just committed (a snapshot
// backfill's pinned epoch). ScanOracle scans the table at that epoch;
// Model and bench/genjob's Oracle answer from a model of the table.
type Oracle interface {
	// Rows returns the live rows of a vnode at epoch with pk <= cursor (none
	// for a nil cursor) and all its live rows then.
	Rows(epoch uint64, vnode uint16, cursor []byte) (behind, total int64, err error)
}

// Truth scores a job's checkpoint records against the truth: set its Score
// as the job's (backfill.JobConfig.Score), and every record the job hands
// on carries its truth (Record.Truth, each upstream's Truth) and the
// errors of the stats estimator's per-vnode estimates (VnodeErrMean,
// VnodeErrMax).
type Truth struct {
	// Oracles are the oracles of the job's upstream tables, by index (one
	// for a job over one table).
	Oracles []Oracle
	// Store and LogStore are a snapshot backfill's store and log-store
	// table, whose rows at the committed epoch in the record's vnodes, but
	// for their account rows, are the log rows still to consume (counted
	// by a scan); unused otherwise.
	Store    *lsm.Store
	LogStore uint32
	// LogSnapshot, if set, is where the log-store rows are counted instead
	// of the store's committed epoch: a snapshot pinned at the checkpoint
	// scored, for a truth computed after the job moved on.
	LogSnapshot *lsm.Snapshot
}

// Oracles returns the Score of a Truth over the oracles of a job's
// upstream tables, by index (an arrangement backfill's).
func Oracles(oracles ...Oracle) func(context.Context, *backfill.Record) error {
	return Truth{Oracles: oracles}.Score
}

// Score sets a checkpoint record's truth: over every vnode of every
// upstream table, Σ live rows behind the cursors over Σ live rows
// (docs/design.md §7), each table's beside it. A snapshot backfill's truth
// is the snapshot's rows at its pinned epoch while its snapshot is read,
// then all of them (as the statistics counted them when pinned), plus the
// log rows consumed, over those plus the rows the log store holds. It
// returns ctx's error between the oracle's vnodes.
func (t Truth) Score(ctx context.Context, rec *backfill.Record) error {
	c, err := t.count(ctx, rec)
	if err != nil {
		return err
	}
	rec.Truth = percent(c.behind, c.total)
	for u := range rec.Upstreams {
		rec.Upstreams[u].Truth = percent(c.ub[u], c.ut[u])
	}
	rec.VnodeErrMean, rec.VnodeErrMax = 0, c.errMax
	if c.n > 0 {
		rec.VnodeErrMean = c.errSum / float64(c.n)
	}
	return nil
}

// Rows returns the truth's numbers for a checkpoint record, as Score
// computes them: the rows behind (consumed) and all the rows. A job's
// parts' numbers add up to the whole job's (JobConfig.Vnodes).
func (t Truth) Rows(ctx context.Context, rec *backfill.Record) (behind, total int64, err error) {
	c, err := t.count(ctx, rec)
	return c.behind, c.total, err
}

// truthCount is what Score and Rows count.
type truthCount struct {
	behind, total  int64
	ub, ut         []int64
	errSum, errMax float64
	n              int
}

func (t Truth) count(ctx context.Context, rec *backfill.Record) (truthCount, error) {
	if len(t.Oracles) != max(1, len(rec.Upstreams)) {
		return truthCount{}, errors.Newf("backfilltest: %d oracles for a job of %d upstream tables", len(t.Oracles), len(rec.Upstreams))
	}
	nu := len(t.Oracles)
	var behind, total int64
	ub, ut := make([]int64, nu), make([]int64, nu)
	at, snapshotRead := rec.Epoch, false
	if rec.Phase != "" {
		at, snapshotRead = rec.SnapshotEpoch, rec.Phase != backfill.PhaseSnapshot.String()
		pending, err := t.logRows(rec)
		if err != nil {
			return truthCount{}, err
		}
		behind, total = int64(rec.LogConsumed), int64(rec.LogConsumed)+pending
		if snapshotRead {
			for u, n := range rec.SnapshotTotals {
				behind, total, ub[u], ut[u] = behind+n, total+n, n, n
			}
		}
	}
	var errSum, errMax float64
	n := 0
	for i, v := range rec.Vnodes {
		if snapshotRead {
			break
		}
		if err := ctx.Err(); err != nil {
			return truthCount{}, err
		}
		if v.Upstream < 0 || v.Upstream >= nu {
			return truthCount{}, errors.Newf("backfilltest: vnode %d of upstream %d, %d oracles", v.Vnode, v.Upstream, nu)
		}
		b, tot, err := t.Oracles[v.Upstream].Rows(at, v.Vnode, v.Cursor)
		if err != nil {
			return truthCount{}, err
		}
		total += tot
		ut[v.Upstream] += tot
		switch {
		case v.Finished:
			behind += tot
			ub[v.Upstream] += tot
		case v.Cursor != nil:
			behind += b
			ub[v.Upstream] += b
			// The stats estimator's own estimate of this vnode.
			if tot > 0 && len(rec.Estimates) == len(rec.Vnodes) {
				e := 100 * math.Abs(rec.Estimates[i].Consumed-float64(b)) / float64(tot)
				errSum += e
				errMax = max(errMax, e)
				n++
			}
		}
	}
	return truthCount{behind: behind, total: total, ub: ub, ut: ut, errSum: errSum, errMax: errMax, n: n}, nil
}

// logRows counts the log-store rows of the record's vnodes (the job's: a
// change of an upstream's vnode v is logged in vnode v) at the committed
// epoch (or in LogSnapshot), less each vnode's account row (pk (v, 0, 0),
// docs/format.md).
func (t Truth) logRows(rec *backfill.Record) (int64, error) {
	if (t.Store == nil && t.LogSnapshot == nil) || t.LogStore == 0 {
		return 0, errors.New("backfilltest: the truth of a snapshot backfill needs its Store (or LogSnapshot) and LogStore")
	}
	seen := map[uint16]bool{}
	var n int64
	for _, v := range rec.Vnodes {
		if seen[v.Vnode] {
			continue
		}
		seen[v.Vnode] = true
		lo := keys.AppendUint64(keys.AppendUint64(keys.AppendUint64(nil, uint64(v.Vnode)), 1), 0)
		var it *lsm.Iter
		var err error
		if t.LogSnapshot != nil {
			it, err = t.LogSnapshot.NewIter(t.LogStore, v.Vnode, lo, nil)
		} else {
			it, err = t.Store.NewIter(t.LogStore, v.Vnode, lo, nil)
		}
		if err != nil {
			return 0, err
		}
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// percent is the job's figure of rows: 100 when there are none.
func percent(behind, total int64) float64 {
	if total <= 0 {
		return 100
	}
	return 100 * float64(behind) / float64(total)
}
