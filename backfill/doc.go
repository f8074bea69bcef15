// Package backfill is an arrangement backfill, as RisingWave runs one to
// build a materialized view from an existing table while the table keeps
// changing, with both ways of reporting its progress side by side.
//
// # The job (job.go, executor.go)
//
// A Job drives a Source (the upstream: one step of row ops per epoch,
// replayable after a restart) through the store and a set of Actors, each
// owning a contiguous range of the upstream table's vnodes: an actor applies
// upstream changes to its replicated table (package replicated) as they
// come, and at each barrier reads a quota of snapshot rows, forwards the
// changes its cursors have passed, writes the MV and persists its vnodes'
// state (the Actor type says how). Every n-th barrier is a checkpoint: the
// store commits the epoch, and everything above is durable together. A
// restart resumes every vnode from its persisted state, with any number of
// actors (rescale), and the MV ends equal to the upstream table (checked by
// the tests after crashes, and by every benchmark run).
//
// # State (state.go)
//
// One row per vnode in the backfill state table: its cursor (the pk of the
// last snapshot row read), whether it finished, and, only for the
// row-count approach, the number of snapshot rows read. The stats approach
// persists no count: its state rows are a few bytes shorter per vnode
// (BenchmarkBackfill's state-bytes/barrier).
//
// # Progress (progress.go)
//
// Progress reporting follows RisingWave: each actor reports its state at
// every barrier through a Reporter (Update, then Finish once all its
// vnodes are done; epochs strictly increasing), and a job-level Tracker (the
// meta side) aggregates the reports of all actors of a job at each
// checkpoint into a figure per Estimator.
//
// Two estimators compare the two ways of estimating progress on identical
// work:
//
//   - RowCount is RisingWave today: consumed = Σ row_count persisted per
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
// all live rows, at the committed epoch; an Oracle computes it for tests
// and benchmarks. How close each approach comes to it, and what each costs
// per checkpoint, is measured by bench's BenchmarkBackfill and accuracy
// matrix; make results writes the figures into README.md.
//
// The displayed figure is "%.2f%% [lower–upper] (consumed/total)", the
// bounds there when the estimator gives them (an Accountant, as Stats is):
// the sums of the vnodes' bounds, which hold the truth. It never decreases
// within a job (its high-water mark is persisted and survives crashes and
// rescale), is never 100% before the job finished, and is exactly 100% when
// it has.
//
// # ETA (eta.go)
//
// Every checkpoint Record also carries an ETA (ETAForecast): the live rows
// ahead of the cursors, from the Stats account and its bounds, plus the
// upstream's churn ahead, over a smoothed snapshot read rate, with an
// interval; per actor, so that the slowest actor sets it. The job's rate
// limit (JobConfig.RateLimit, RateChanges, Job.SetRateLimit) and the ETA's
// carried rate are persisted in the job's metadata row, so that both
// survive restarts and rescales. eta.go's file comment explains the
// estimator; bench's BenchmarkETA measures it on the real backfill.
package backfill
