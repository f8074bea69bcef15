package workload

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
)

// A Shape is the primary-key shape of a workload's table: its pk schema,
// its distribution key, and the pk of every row id. Each is shaped like a
// kind of table that real systems hold, so that estimates are judged on
// more than one generator's favourite keys.
//
//	hashed        (dist u64, id u64), distribution key dist: a hash of the
//	              id, or a Zipf draw (Params.Zipf) so that hot values pile
//	              up rows that share their first 8 bytes
//	sequential    (id u64), auto-increment ids, distribution key the pk;
//	              rows inserted during the backfill take the next ids
//	parent-child  (parent u64, child u64): orders with 1 to Children line
//	              items each, parents numbered in order, distribution key
//	              the parent, so a parent's children share a vnode and the
//	              first 8 bytes of their pk
//	low-card      (category bytes, id u64): a few dozen categories sharing
//	              a long prefix, distribution key the category, so that
//	              most vnodes are empty and a few hold everything
//	string        (key bytes): keys of 6 to 24 characters behind a long
//	              common prefix, distribution key the whole pk
//	timeseries    (source bytes, ts u64): a few hundred sources, increasing
//	              timestamps, distribution key the source; rows inserted
//	              during the backfill land at the high end of each source
type Shape string

// The pk shapes.
const (
	Hashed      Shape = "hashed"
	Sequential  Shape = "sequential"
	ParentChild Shape = "parent-child"
	LowCard     Shape = "low-card"
	String      Shape = "string"
	Timeseries  Shape = "timeseries"
)

// Shapes lists every shape, in a stable order.
func Shapes() []Shape {
	return []Shape{Hashed, Sequential, ParentChild, LowCard, String, Timeseries}
}

// ParseShape returns the named shape.
func ParseShape(s string) (Shape, error) {
	for _, sh := range Shapes() {
		if string(sh) == s {
			return sh, nil
		}
	}
	names := make([]string, 0, 6)
	for _, sh := range Shapes() {
		names = append(names, string(sh))
	}
	return "", errors.Newf("workload: unknown pk shape %q (known: %s)", s, strings.Join(names, ", "))
}

// schema returns the pk schema and the number of distribution-key columns.
func (s Shape) schema() (keys.Schema, int) {
	switch s {
	case Sequential:
		return keys.Schema{keys.Uint64}, 1
	case LowCard:
		return keys.Schema{keys.Bytes, keys.Uint64}, 1
	case String:
		return keys.Schema{keys.Bytes}, 1
	case Timeseries:
		return keys.Schema{keys.Bytes, keys.Uint64}, 1
	default: // Hashed, ParentChild
		return keys.Schema{keys.Uint64, keys.Uint64}, 1
	}
}

const (
	// lowCardValues is the number of categories of the low-card shape, and
	// lowCardPrefix their shared prefix.
	lowCardValues = 36
	lowCardPrefix = "tenant/acme-corporation/region/eu-west-1/category-"
	// stringPrefix is the common prefix of the string shape's keys.
	stringPrefix = "https://shop.example.com/catalogue/products/"
	// timeseriesSources is the number of sources of the timeseries shape.
	timeseriesSources = 300
	timeseriesPrefix  = "sensor/plant-7/line-3/"
	// defaultChildren is the largest number of children of a parent.
	defaultChildren = 7
)

// HashedPK is the pk of row id in the hashed shape without skew: a hash
// of the id and the seed, then the id. A caller that holds no model (the
// scale benchmark's solo child) computes a row's pk from its id alone.
func HashedPK(id, seed uint64) []byte {
	return keys.AppendUint64(keys.AppendUint64(make([]byte, 0, 16), mix(id^seed)), id)
}

// pks returns the pk of every row id: ids [0, p.Rows) are loaded, the
// rest are inserted during the backfill (the shapes with an order give
// them the next positions: new ids, new parents, later timestamps).
func (s Shape) pks(p Params, n int) [][]byte {
	out := make([][]byte, n)
	r := rand.New(rand.NewPCG(p.Seed, 0x5ba9e))
	switch s {
	case Hashed:
		var zipf *rand.Zipf
		if p.Zipf > 0 {
			zipf = rand.NewZipf(rand.New(rand.NewPCG(p.Seed, 0x5eed)), p.Zipf, 1, uint64(max(1, p.Rows)))
		}
		for id := range n {
			if zipf == nil {
				out[id] = HashedPK(uint64(id), p.Seed)
				continue
			}
			out[id] = keys.AppendUint64(keys.AppendUint64(make([]byte, 0, 16), zipf.Uint64()), uint64(id))
		}
	case Sequential:
		for id := range n {
			out[id] = keys.AppendUint64(make([]byte, 0, 8), uint64(id)+1)
		}
	case ParentChild:
		k := max(p.Children, 1)
		parent, child, children := uint64(1), uint64(0), 1+r.IntN(k)
		for id := range n {
			if child == uint64(children) {
				parent, child, children = parent+1, 0, 1+r.IntN(k)
			}
			child++
			out[id] = keys.AppendUint64(keys.AppendUint64(make([]byte, 0, 16), parent), child)
		}
	case LowCard:
		for id := range n {
			cat := fmt.Sprintf("%s%03d", lowCardPrefix, r.IntN(lowCardValues))
			out[id] = keys.AppendUint64(keys.AppendBytes(nil, []byte(cat)), uint64(id)+1)
		}
	case String:
		seen := make(map[string]struct{}, n)
		const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789-"
		var b []byte
		for id := range n {
			for {
				b = append(b[:0], stringPrefix...)
				l := 6 + r.IntN(19)
				for i := range l {
					c := alphabet[r.IntN(len(alphabet)-1)]
					if i > 0 && i < l-1 && r.IntN(8) == 0 {
						c = '-' // words
					}
					b = append(b, c)
				}
				if _, dup := seen[string(b)]; !dup {
					seen[string(b)] = struct{}{}
					break
				}
			}
			out[id] = keys.AppendBytes(nil, b)
		}
	case Timeseries:
		const start = 1_700_000_000_000 // ms
		for id := range n {
			src := fmt.Sprintf("%s%05d", timeseriesPrefix, r.IntN(timeseriesSources))
			ts := start + uint64(id)*10 + uint64(r.IntN(10))
			out[id] = keys.AppendUint64(keys.AppendBytes(nil, []byte(src)), ts)
		}
	}
	return out
}
