package bench

import (
	"context"
	"fmt"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/lsm"
)

// Churn is one of the accuracy matrix's churn patterns.
type Churn string

// The churn patterns of the accuracy matrix.
const (
	// NoChurn loads the table and backfills it, nothing else.
	NoChurn Churn = "none"
	// Updates updates 30% of the rows before the backfill.
	Updates Churn = "updates"
	// PrefixDeletes deletes the lowest 50% of each vnode's pks before the
	// backfill: a table consumed from its low end.
	PrefixDeletes Churn = "prefix-deletes"
	// During inserts 20%, updates 20% and deletes 10% of the rows during the
	// backfill.
	During Churn = "during"
)

// Churns lists the churn patterns in a stable order.
func Churns() []Churn { return []Churn{NoChurn, Updates, PrefixDeletes, During} }

// Cell is one run of the accuracy matrix: a pk shape, a table size, a
// vnode count and a churn pattern. Every run is dropped once in the middle
// of its backfill and resumed from what the store persisted.
type Cell struct {
	Shape  workload.Shape
	Rows   int
	Vnodes int
	Churn  Churn
	// BucketBudget is the store's Options.StatsBucketBudget (0: the
	// default).
	BucketBudget int
}

// String is the cell's sub-benchmark name.
func (c Cell) String() string {
	s := fmt.Sprintf("shape=%s/rows=%s/vnodes=%d/churn=%s", c.Shape, countName(c.Rows), c.Vnodes, c.Churn)
	if c.BucketBudget != 0 {
		s += fmt.Sprintf("/budget=%d", c.BucketBudget)
	}
	return s
}

func countName(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// matrixActors is the number of backfill actors of every cell (of a
// one-vnode cell: one), and
// matrixCheckpoints about the number of checkpoints a cell's backfill
// takes, whatever its size: each actor reads Rows/(actors·checkpoints)
// snapshot rows per barrier, at least 64 and at most 4096.
const (
	matrixActors      = 2
	matrixCheckpoints = 40
)

// Config returns the run of the cell in dir.
func (c Cell) Config(dir string, seed uint64) (Config, error) {
	if c.Rows < 1 {
		return Config{}, errors.Newf("bench: cell %s has no rows", c)
	}
	p := workload.Params{Rows: c.Rows, VnodeCount: c.Vnodes, Seed: seed, Shape: c.Shape, BatchRows: 20000}
	switch c.Churn {
	case NoChurn:
	case Updates:
		p.UpdateFrac = 0.3
	case PrefixDeletes:
		p.DeleteFrac, p.DeleteOrder = 0.5, "prefix"
	case During:
		p.InsertDuring, p.UpdateDuring, p.DeleteDuring = 0.2, 0.2, 0.1
	default:
		return Config{}, errors.Newf("bench: unknown churn %q", c.Churn)
	}
	actors := min(matrixActors, c.Vnodes)
	barrierRows := min(max(c.Rows/(actors*matrixCheckpoints), 64), 4096)
	p.DuringSteps = max(1, c.Rows/(actors*barrierRows))
	return Config{
		Dir: dir, Workload: p, Actors: actors, ChunkSize: 256, BarrierRows: barrierRows,
		Store:     &lsm.Options{Logger: lsm.QuietLogger(nil), StatsBucketBudget: c.BucketBudget},
		RestartAt: matrixCheckpoints / 2,
	}, nil
}

// Run runs the cell in dir with both approaches and returns the summary;
// the MV must equal the upstream table at the end.
func (c Cell) Run(ctx context.Context, dir string, seed uint64) (Summary, error) {
	cfg, err := c.Config(dir, seed)
	if err != nil {
		return Summary{}, err
	}
	sum, err := Run(ctx, cfg)
	if err != nil {
		return sum, errors.Wrapf(err, "cell %s", c)
	}
	if !sum.MVMatches {
		return sum, errors.Newf("cell %s: %s", c, sum.MVError)
	}
	return sum, nil
}
