package bench

import (
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/bench/workload"
)

// MultiWorkloads returns the workloads of a job over several upstream tables of
// the given sizes: the first "mixed" (updates, deletes and inserts before
// and during the backfill) in 256 vnodes with hashed pks, the others
// alternately "update-churn" in 64 vnodes with sequential pks and
// "delete-churn" in 16 vnodes with string pks.
func MultiWorkloads(rows []int, seed uint64) ([]workload.Params, error) {
	var ps []workload.Params
	for i, n := range rows {
		name, vnodes, shape := "mixed", 256, workload.Hashed
		if i > 0 {
			name, vnodes, shape = "update-churn", 64, workload.Sequential
			if i%2 == 0 {
				name, vnodes, shape = "delete-churn", 16, workload.String
			}
		}
		p, err := workload.Preset(name, n, vnodes, seed+uint64(i))
		if err != nil {
			return nil, err
		}
		p.Shape, p.DuringSteps = shape, 40
		ps = append(ps, p)
	}
	return ps, nil
}

// ParseRows parses a comma-separated list of row counts ("1000000,20000").
func ParseRows(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, errors.Newf("bench: rows %q: want a comma-separated list of counts >= 0", s)
		}
		out = append(out, n)
	}
	return out, nil
}
