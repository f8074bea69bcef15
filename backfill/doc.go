// Package backfill is an arrangement backfill, as RisingWave runs one to
// build a materialized view from an existing table while the table keeps
// changing, with both ways of reporting its progress side by side.
//
// # The job (job.go, executor.go)
//
// A Job drives a Source (the upstream: one step of row ops per epoch,
// resumed after a restart from the last step the job committed, never
// replayed from the beginning; Resume and Next are all it needs, and a
// source that loads its table first or wants to hear of the finish also
// implements Loader or FinishListener) through the store and a set of Actors, each
// owning a contiguous range of the upstream table's vnodes: an actor applies
// upstream changes to its replicated table (package replicated) as they
// come, and at each barrier reads a quota of snapshot rows, forwards the
// changes its cursors have passed, writes the MV and persists its vnodes'
// state (the Actor type says how). The quota comes from one vnode after
// another (VnodeOrder, the default: the upstream in storage order, the MV
// written as appends), or from every unfinished vnode in turn, as
// RisingWave reads (Interleaved: about one and a half times the CPU per
// row on an embedded store, where there is no remote latency for the
// interleaving to hide; each vnode's read serves several barriers, so
// that a barrier does not seek into every vnode). Every n-th barrier is a checkpoint: the
// store commits the epoch, and everything above is durable together. Under
// Run the commit runs beside the next step (the upstream's next ops and
// barrier), as Hummock syncs an epoch while the next one runs, and the
// checkpoint's record comes once it landed (Job.Run says when).
// Under Run, an actor reads the next barrier's snapshot rows, and writes
// them into the MV, as soon as it has acknowledged a barrier
// (Barrier.ReadAhead), so that this work overlaps the job's commit instead
// of waiting for it: the next barrier reads at the epoch just acknowledged,
// which the actor's replicated table already holds whole, committed or
// not, and from the cursors just set; the upstream chunks that arrive in
// between belong to a later epoch, and their forwarded ops still follow the
// snapshot rows in the MV's epoch. The output is that of a read at the
// barrier (TestReadAhead compares a Run with a Step loop); only the
// vnodes' states wait for the barrier. A restart resumes every vnode from its persisted state, with any number of
// actors (rescale), and the MV ends equal to the upstream table (checked by
// the tests after crashes, and by every benchmark run).
//
// # The driver (driver.go)
//
// OpenJob and Job.Run run one opening of a job. A Driver runs the job to
// its end through every opening: Driver.Open configures each (the store,
// the source), Driver.Run opens the job and runs it, and after each
// checkpoint Driver.Restart may stop it there as a close, a cancel or a
// crash would (RestartClose, RestartCancel, RestartCrash), with another
// number of actors if it asks (a rescale), and open it again at once.
// Driver.OnCheckpoint gets every record in order: each checkpoint's, and
// after each opening of a job that had started the figure it shows before
// its first new barrier (Job.Initial), marked Record.Reopened, also when
// the opening is a Run in a new process after a crash or a cancel.
// ExampleDriver crashes a job at 50% and reopens it with twice the
// actors; package bench's Run is a Driver with its measurements around it.
//
// # Several upstream tables, and snapshot backfill
//
// A job may read several upstream tables (JobConfig.Upstreams), as a join
// MV backfills each of its inputs: the same actors own a range of every
// table's vnodes, the state persists per (upstream, vnode) in each table's
// state table, and the figures are Σ consumed over Σ total over every
// table, each table's beside them (Record.Upstreams). A job over one table
// is the case of one. With JobConfig.Mode = ModeSnapshot the job is a
// snapshot backfill (snapshot.go): a snapshot read at a pinned epoch while
// the upstream's changes go to a log-store table, then the log store
// consumed epoch by epoch, then the upstream joined; one phase-aware
// figure, finished only once joined (Record.Phase). docs/design.md §6 and
// §7 describe both and their truths.
//
// # A job over a subset of the vnodes
//
// With JobConfig.Vnodes the job is one part of a job whose vnodes several
// stores (nodes) share, each store holding its vnodes' rows of the
// upstream, MV and state tables and running its part; a coordinator
// injects the same barriers into every part (so their stores commit the
// same epochs) and moves vnode ranges between stores (lsm.Store.MoveVnodes
// of the upstream, MV and state tables, and a snapshot backfill's log
// store: a vnode's state row moves with its rows). A part's
// actors split its vnodes only, and its source must give it the ops of its
// vnodes only (another is ErrUnownedVnode; bench/genjob's Part filters a
// whole table's workload so). Everything a part reports is of its vnodes:
// Record.Vnodes, Finished, Compare, and the figures: Stats sums its vnodes'
// live rows and estimates as always, RowCountEstimator sums the physical
// key counts of its vnodes (Input.Owned) instead of the whole table's.
// A Figure's Consumed and Total are raw (before any display rule), and
// Bounds.LowerRows and UpperRows are the bounds in rows: the job's figure
// is Σ Consumed / Σ Total over its parts' figures of the same checkpoint
// epoch, its bounds Σ LowerRows and Σ UpperRows over Σ Total, exactly as
// one job over every vnode would compute them.
//
// A part reopened with another set (after a move in or out) is a rescale
// across stores: a vnode with a state row resumes from it, one without
// starts fresh, and Finished is recomputed from the states (vnodes moved
// in unfinished make a finished part unfinished again). The display's
// high-water mark, persisted in the job's metadata row, is a whole job's:
// a part's figure is of vnodes that change at a move, and may fall when
// vnodes with work ahead move in. So a part persists none and restores
// none: its display is monotone within one opening only, and the job's
// displayed figure, monotone across moves, is the coordinator's to keep,
// from the parts' raw figures. Several upstream tables must have one vnode
// count, the set applying to each.
//
// A snapshot backfill runs in parts too, and its parts move vnodes in any
// phase, because its log store is partitioned as the upstream: a change
// of vnode v is logged in the log store's vnode v, beside v's account row
// (v's live rows at the snapshot epoch, its log rows consumed). A move of
// a range of the log store with the other tables' takes exactly those
// vnodes' pending changes and their share of the figure, so the parts'
// phase-aware figures still add up to the job's. A part consumes its
// vnodes' logs merged in epoch order (whole epochs, one quota per
// barrier), and each opening sets its phase from its vnodes: vnodes moved
// in unread take it back to the snapshot phase (the snapshot epoch pinned
// again), vnodes with changes still to consume take a joined part back to
// the log-store phase. Its parts must start at the same step, and every
// vnode be some part's then (a vnode without its account is refused).
//
// # Upstream ops
//
// A source writes an update or a delete in one of two forms:
//
//   - The fast form (Delete, UpdateDelete + UpdateInsert) carries the old
//     row, which the source must know: the job trusts it and forwards it to
//     the actors and the MV as it is. With JobConfig.Unchecked the upstream
//     writer writes it blind (no read at all); without, the writer reads the
//     stored row once to check it (lsm.ErrInconsistentOp if it differs).
//   - The checked form (CheckedDelete, CheckedUpdate) carries no old row:
//     the job reads it through the upstream writer (lsm.Writer.Get: the
//     step's earlier ops, the epochs not committed yet, then one point read
//     of the committed table), so the source need not track every row's
//     value. It costs that read per op, on top of the writer's own check
//     when the writer is checked (that second read finds the row in
//     Pebble's block cache). A pk without a live row fails the step with
//     lsm.ErrInconsistentOp.
//
// Inserts have one form: the new row. Both forms reach the actors and the
// MV identically.
//
// # Cancellation
//
// Run and Step return ctx's error, within a chunk of work, when ctx is
// cancelled in any phase of a step: between upstream ops (every 1024), in
// the actors' snapshot reads (every chunk's worth of rows, read ahead or
// not), between phases and
// in JobConfig.Score (backfilltest.Truth looks between its oracle's
// vnodes). A commit in progress is atomic and is not
// interrupted: the cancellation is returned when it ends. No goroutine of
// the job outlives Run or Step. A job whose step failed or was cancelled
// holds uncommitted work, and further Run and Step calls return
// ErrStopped: Close it (promptly, whatever the phase) and reopen it from
// the store.
//
// # State (state.go)
//
// One row per vnode in the backfill state table: its cursor (the pk of the
// last snapshot row read), whether it finished, and, only for the
// row-count approach, the number of snapshot rows read. The stats approach
// persists no count: its state rows are a few bytes shorter per vnode
// (BenchmarkBackfill's state-bytes/barrier). The job's metadata row (its
// step, barrier, high-water marks, rate limit, ETA carry-over and a
// snapshot backfill's phase) is encoded there too (encodeMeta, decodeMeta;
// docs/format.md).
//
// # Progress (progress.go)
//
// Progress reporting follows RisingWave: each actor reports its state at
// every barrier through a Reporter (Update, then Finish once all its
// vnodes are done; epochs strictly increasing), and a job-level ProgressTracker (the
// meta side) aggregates the reports of all actors of a job at each
// checkpoint into a figure per Estimator.
//
// Two estimators compare the two ways of estimating progress on identical
// work:
//
//   - RowCountEstimator is RisingWave today: consumed = Σ row_count persisted per
//     vnode (snapshot rows read), total = the upstream table's physical key
//     count (Hummock's total_key_count: every version and tombstone). It is
//     pessimistic under churn and can pass 100%.
//   - Stats is this project's: consumed = Σ live rows of finished vnodes +
//     Σ estimated live rows <= cursor of vnodes in progress, total = Σ live
//     rows of the job's vnodes. Its inputs are the cursors, the finished
//     flags and the statistics API: it reads no table data and keeps no
//     count of emitted rows. It asks the estimates of all its vnodes in
//     progress in one call (stats.Snapshot.AppendEstimates), whose searches
//     overlap their cache misses.
//
// The truth (docs/design.md §7) is the live rows at or below each cursor over
// all live rows, at the committed epoch. The job does not know it: tests
// and benchmarks score its records against it (JobConfig.Score, with
// backfilltest.Truth over an oracle per table), and bench times the
// estimators (JobConfig.OnEstimate). How close each approach comes to it, and what each costs
// per checkpoint, is measured by bench's BenchmarkBackfill and accuracy
// matrix; make results writes the figures into docs/results.md.
//
// The displayed figure is "%.2f%% [lower–upper] (consumed/total)", the
// bounds there when the estimator gives them (an Accountant, as Stats is):
// the sums of the vnodes' bounds, which hold the truth. It never decreases
// within a job (its high-water mark is persisted and survives crashes and
// rescale; a job part's only within an opening, see above), is never 100%
// before the job finished, and is exactly 100% when it has.
//
// # ETA (eta.go)
//
// Every checkpoint Record also carries an ETA (ETAForecast): the live rows
// ahead of the cursors, from the Stats account and its bounds, plus the
// upstream's churn ahead, over a snapshot read rate that blends the smoothed
// rate with the rate since the last known change, by how well each foresaw
// the job's own recent past, with an interval; per actor, so that the
// slowest actor sets it. The rate-limit
// changes still scheduled (RateChanges) are in the forecast, and so are the
// store's flushes still ahead (lsm.Store.Background: the job's rate is read
// free of the flushes and compactions that slowed it, and the forecast
// adds back those its rows ahead will cause). The job's rate
// limit (JobConfig.RateLimit, RateChanges, Job.SetRateLimit) and the ETA's
// carried rate are persisted in the job's metadata row, so that both
// survive restarts and rescales. eta.go's file comment explains the
// estimator; bench's BenchmarkETA measures it on the real backfill, beside
// PlainETA (eta_plain.go), a plain smoothed-rate baseline.
package backfill
