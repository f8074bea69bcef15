package stats_test

import (
	"fmt"
	"log"
	"os"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/stats"
)

// Example reads the statistics of a table with a composite pk (customer
// bytes, order u64) distributed by its customer: the live rows of each
// vnode, the rows below a pk of one vnode with their bounds, and a
// partition of the table into ranges of equal rows — none of which reads
// the table's rows.
func Example() {
	dir, err := os.MkdirTemp("", "lsmstats-stats-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	s, err := lsm.Open(dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
	def := lsm.TableDef{ID: 1, Name: "orders", VnodeCount: 4, PK: keys.Schema{keys.Bytes, keys.Uint64}, DistKeyColumns: 1}
	if err := s.CreateTable(def); err != nil {
		log.Fatal(err)
	}
	def, _ = s.Table(1)
	w, err := s.NewWriter(1, nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	epoch := s.EpochFloor() + 1
	pkOf := func(customer string, order uint64) []byte {
		return keys.AppendUint64(keys.AppendBytes(nil, []byte(customer)), order)
	}
	vnode := func(customer string) uint16 { return def.VnodeOf(keys.AppendBytes(nil, []byte(customer))) }
	for c := range 20 {
		customer := fmt.Sprintf("customer-%02d", c)
		for order := range uint64(100) {
			if err := w.Insert(epoch, vnode(customer), pkOf(customer, order), []byte("an order")); err != nil {
				log.Fatal(err)
			}
		}
	}
	if err := w.Seal(epoch); err != nil {
		log.Fatal(err)
	}
	if err := s.Commit(epoch); err != nil {
		log.Fatal(err)
	}

	var snap stats.Snapshot = s.Stats()
	var total int64
	for v := range uint16(4) {
		total += snap.Live.Vnode(1, v).Rows
	}
	fmt.Println("live rows:", total, "physical entries:", snap.Physical.Table(1).TotalKeyCount)

	// The rows of customer-07's vnode below (customer-07, 49): an unbiased
	// estimate within Lower and Upper, which always hold the truth (the
	// counts are exact but for the one bucket the pk falls in).
	cursor := pkOf("customer-07", 49)
	var below stats.RowEstimate = snap.Live.EstimateRows(1, vnode("customer-07"), nil, cursor)
	truth := int64(0)
	for c := range 20 {
		if customer := fmt.Sprintf("customer-%02d", c); vnode(customer) == vnode("customer-07") && customer <= "customer-07" {
			truth += 100
		}
	}
	truth -= 51 // (customer-07, 49..99) lie at or above the cursor
	fmt.Println("bounds hold the truth:", below.Lower <= truth && truth <= below.Upper)

	// Four ranges of about equal rows, for four parallel scans.
	var rows []int64
	for _, r := range snap.Live.Partition(1, roaring.BitmapOf(0, 1, 2, 3), 4) {
		rows = append(rows, r.Rows)
	}
	fmt.Println("ranges:", len(rows))
	// Output:
	// live rows: 2000 physical entries: 2000
	// bounds hold the truth: true
	// ranges: 4
}
