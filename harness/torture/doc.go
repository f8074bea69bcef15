// Package torture holds the crash torture of the whole stack (torture_test.go).
//
// A child process runs everything at once on one store: upstream writes
// with churn, spills (a small memory watermark), checkpoints every other
// barrier, an arrangement backfill with two actors, and a compaction policy
// that garbage-collects and compacts in the background. The parent kills it
// with SIGKILL at random moments, aiming in turn at each phase — buffering
// upstream ops, spilling, committing (and ingesting), a backfill step, GC,
// and a Pebble compaction — and tags each kill with every phase that was
// active when it landed. After every kill it reopens the store and checks:
//
//   - the upstream table is exactly the workload replayed to the committed
//     step (every committed epoch is present, nothing later);
//   - no table holds a version above the committed epoch;
//   - the MV holds exactly the upstream rows behind the backfill's cursors
//     (all rows of finished vnodes, rows at or below the cursor of the
//     others), which is what the job has committed to;
//   - Verify finds no difference between any statistic and its
//     recomputation.
//
// When a job finishes, the parent checks the MV equals the upstream table and
// starts the next job in a fresh directory, until the kills are done.
//
//	go test ./harness/torture -torture-kills 1000     (make torture)
package torture
