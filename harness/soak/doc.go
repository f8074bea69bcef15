// Package soak runs backfill jobs on churning workloads, one after another
// over one store directory, for a long time, while it injects the events a
// deployment meets — and checks after each event that nothing was lost.
//
// # Events
//
// The parent (Run) starts a worker process (this test binary again, see
// Worker) for each event. The worker opens the store, recovers the current
// job from the committed state with a random actor count (so every restart
// may be a rescale) and runs it, reporting each committed step and
// checkpoint on stdout. The event decides how the run ends:
//
//   - sigkill: the parent kills the worker with SIGKILL after a random time;
//   - fault: the worker's file system (Pebble's errorfs) fails random
//     operations of a random kind (SST and spill writes, reads, syncs, the
//     WAL, the MANIFEST, OPTIONS) from a random moment on. The worker ends
//     with an error carrying the injected fault, with Pebble's Fatalf (a
//     crash), with a panic Pebble raised on the fault (a crash), or — when
//     the faults missed — like a reopen at its time limit;
//   - cancel: the worker cancels the job's context at a random moment; the
//     job must return promptly with the cancellation, and the worker closes
//     the job and the store cleanly;
//   - reopen: the worker stops the job after a few checkpoints, closes
//     everything cleanly, and the next run reopens it with another actor
//     count.
//
// Every run but a SIGKILLed one stops cleanly after 2 to 6 s at most (so
// that an event lands on a job in progress, not on whole jobs). One worker
// in four first garbage collects and compacts the tables of a
// finished job (Pebble SINGLEDELs, and compactions that elide them), under
// the same event.
//
// # Checks
//
// After every event the parent opens the store itself and checks:
//
//   - every committed row is there: the job's upstream table equals the
//     workload replayed to the committed step, and the committed step is at
//     least the last one the worker reported;
//   - the MV holds exactly the upstream rows the backfill has read: all of
//     a finished vnode, those at or below the cursor of a vnode in progress;
//     a finished job's MV equals its upstream table, and stays so (the
//     tables of finished jobs are checked again later);
//   - the statistics equal a recomputation (Store.Verify finds no
//     difference, no corruption and nothing it could not check);
//   - the display rules: each approach's displayed figure never decreases
//     within a job, across restarts and rescales; it is never 100% before
//     the job finished and exactly 100% once it has.
//
// A worker that neither ends nor reports within a timeout is a hang. Every
// failed check, hang and unexpected worker end is a finding. Run returns
// the events per kind and the findings.
//
// # The driver
//
// RunJob is the only code that drives a job: the soak's workers and its
// checks reach the backfill through it and through backfill.OpenJob's
// configuration (jobConfig). To soak another way of running jobs, port
// those two.
package soak
