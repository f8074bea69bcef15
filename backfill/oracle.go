package backfill

import (
	"bytes"

	"github.com/lsmstats/lsmstats/lsm"
)

// ScanOracle computes the truth by scanning the upstream table at the
// committed epoch: exact and slow (a scan of each vnode per checkpoint).
// Tests use it to check faster exact models.
type ScanOracle struct {
	Store *lsm.Store
	Table uint32
}

var _ Oracle = ScanOracle{}

// Rows implements Oracle.
func (o ScanOracle) Rows(vnode uint16, cursor []byte) (behind, total int64, err error) {
	it, err := o.Store.NewIter(o.Table, vnode, nil, nil)
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
