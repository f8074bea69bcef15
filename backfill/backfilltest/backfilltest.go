// Package backfilltest helps the tests of a backfill job's users check it
// against the exact truth: the score of a job's checkpoints against the
// truth (Truth, the job's JobConfig.Score) from oracles (Oracle), a scan
// oracle told the epoch it answers for (ScanOracle), an incremental oracle
// over the user's own ops (Model, fed by Observe), and a checker of the
// display rules over a job's checkpoint records (Display, across restarts
// and crashes too). The job itself knows no truth.
package backfilltest

import (
	"bytes"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/lsm"
)

// ScanOracle computes the truth (docs/design.md §7) by scanning the
// upstream table at the epoch it is asked about: exact and slow (a scan of
// each vnode per checkpoint; bench's BenchmarkProgressVsScan measures it
// against the statistics). A job over several upstream tables takes one
// per table (Truth.Oracles).
type ScanOracle struct {
	Store *lsm.Store
	Table uint32
	// Snapshot, if set, is scanned instead of Store at the epoch asked:
	// a snapshot pinned at the checkpoint scored, for a truth computed
	// after the job moved on (Store is then unused).
	Snapshot *lsm.Snapshot
}

var _ Oracle = ScanOracle{}

// Rows implements Oracle: the live rows of a vnode at epoch with
// pk <= cursor (none for a nil cursor), and all its live rows then. The
// epoch must be readable (between the store's GC watermark and its
// committed epoch).
func (o ScanOracle) Rows(epoch uint64, vnode uint16, cursor []byte) (behind, total int64, err error) {
	snap := o.Snapshot
	if snap == nil {
		if snap, err = o.Store.Pin(epoch); err != nil {
			return 0, 0, errors.Wrapf(err, "backfilltest: scan oracle at epoch %d", epoch)
		}
		defer snap.Close()
	}
	it, err := snap.NewIter(o.Table, vnode, nil, nil)
	if err != nil {
		return 0, 0, err
	}
	for ok := it.First(); ok; ok = it.Next() {
		total++
		if cursor != nil && bytes.Compare(it.PK(), cursor) <= 0 {
			behind++
		}
	}
	return behind, total, it.Close()
}

// ErrDisplay marks a record that breaks the display rules.
var ErrDisplay = errors.New("backfilltest: display rule broken")

// Display checks the display rules over a job's checkpoint records in the
// order they were shown, across restarts of the job (feed it the records
// of every process, Job.Initial's too): each approach's displayed figure
// never decreases, is never 100% before the job finished, and is 100% once
// it has. The zero Display is ready.
type Display struct {
	last     map[string]float64
	n        int
	finished bool
}

// Add checks the next record.
func (d *Display) Add(r backfill.Record) error {
	if d.last == nil {
		d.last = map[string]float64{}
	}
	d.n++
	if len(r.Figures) == 0 {
		return errors.Wrapf(ErrDisplay, "record %d (barrier %d) has no figure", d.n, r.Barrier)
	}
	for _, f := range r.Figures {
		prev, seen := d.last[f.Approach]
		switch {
		case f.Pct < 0 || f.Pct > 100:
			return errors.Wrapf(ErrDisplay, "barrier %d: %s shows %.2f%%, out of 0..100", r.Barrier, f.Approach, f.Pct)
		case seen && f.Pct < prev:
			return errors.Wrapf(ErrDisplay, "barrier %d: %s decreased from %.2f%% to %.2f%%", r.Barrier, f.Approach, prev, f.Pct)
		case !r.Finished && f.Pct >= 100:
			return errors.Wrapf(ErrDisplay, "barrier %d: %s shows 100%% before the job finished", r.Barrier, f.Approach)
		case r.Finished && f.Pct != 100:
			return errors.Wrapf(ErrDisplay, "barrier %d: the job finished but %s shows %.2f%%", r.Barrier, f.Approach, f.Pct)
		}
		d.last[f.Approach] = f.Pct
	}
	if d.finished && !r.Finished {
		return errors.Wrapf(ErrDisplay, "barrier %d: the job is no longer finished", r.Barrier)
	}
	d.finished = r.Finished
	return nil
}

// Done checks that the job ended finished, at 100%.
func (d *Display) Done() error {
	if d.n == 0 {
		return errors.Wrap(ErrDisplay, "no record")
	}
	if !d.finished {
		return errors.Wrapf(ErrDisplay, "the last of %d records is not finished", d.n)
	}
	return nil
}

// CheckDisplay checks the display rules over a whole sequence of records,
// the last of which must show the job finished.
func CheckDisplay(records []backfill.Record) error {
	var d Display
	for _, r := range records {
		if err := d.Add(r); err != nil {
			return err
		}
	}
	return d.Done()
}
