package compactiondelta

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/sstsummary"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// summary returns the summary of MVCC puts of table 1 at the given
// (vnode, pk, epoch)s, in key order, and the value bytes of each vnode.
func summary(t *testing.T, kvs ...[3]uint64) (*sstsummary.FileSummary, []uint64) {
	c := sstsummary.NewScanCollector()
	for _, kv := range kvs {
		c.Add(keys.AppendVersioned(nil, 1, uint16(kv[0]), keys.AppendUint64(nil, kv[1]), keys.MakeVersion(kv[2], 0), keys.KindPut), pebble.InternalKeyKindSet)
	}
	require.NoError(t, c.Err())
	s := c.Summary()
	values := make([]uint64, len(s.Tables[0].Vnodes))
	for i := range values {
		values[i] = 100 * s.Tables[0].Vnodes[i].Counts.Puts
	}
	return s, values
}

// TestBuilder: a compaction of two versions of one pk into one and a
// vnode it leaves as it was: the delta is outputs minus inputs, per table
// and changed vnode, and a missing file makes it incomplete.
func TestBuilder(t *testing.T) {
	in, inValues := summary(t, [3]uint64{0, 1, 9}, [3]uint64{0, 1, 8}, [3]uint64{3, 7, 5})
	out, outValues := summary(t, [3]uint64{0, 1, 9}, [3]uint64{3, 7, 5})
	b := NewBuilder(4, "default", []File{{FileNum: 1}}, []File{{FileNum: 2, Level: 6}})
	b.Add(in, inValues, false)
	b.Add(out, outValues, true)
	cd := b.Finish()
	require.True(t, cd.Complete())
	require.Equal(t, 4, cd.JobID)
	td, ok := cd.Table(1)
	require.True(t, ok)
	_, ok = cd.Table(2)
	require.False(t, ok)
	key := int64(len(keys.AppendVersioned(nil, 1, 0, keys.AppendUint64(nil, 1), keys.MakeVersion(8, 0), keys.KindPut)))
	want := Delta{Entries: -1, Puts: -1, KeyBytes: -key, ValueBytes: -100}
	require.Equal(t, want, td.Delta)
	require.Equal(t, want, td.Vnode(0))
	require.True(t, td.Vnode(3).IsZero())
	require.Len(t, td.Vnodes, 1, "unchanged vnodes are left out")
	require.Equal(t, uint64(3), td.In.Entries)
	require.Equal(t, uint64(2), td.Out.Entries)

	b = NewBuilder(5, "default", []File{{FileNum: 2}}, []File{{FileNum: 3}})
	b.Missing(3)
	b.Add(out, outValues, false)
	miss := b.Finish()
	require.False(t, miss.Complete())
	require.Equal(t, []uint64{3}, miss.Missing)
}

// TestFeed: deltas reach subscribers in order when delivered, a full
// channel drops (counted), only complete deltas count per table, and
// Close closes the channels.
func TestFeed(t *testing.T) {
	in, inValues := summary(t, [3]uint64{0, 1, 9}, [3]uint64{0, 1, 8})
	out, outValues := summary(t, [3]uint64{0, 1, 9})
	b := NewBuilder(1, "default", []File{{FileNum: 1}}, []File{{FileNum: 2}})
	b.Add(in, inValues, false)
	b.Add(out, outValues, true)
	complete := b.Finish()
	b = NewBuilder(2, "default", []File{{FileNum: 2}}, []File{{FileNum: 3}})
	b.Add(out, outValues, false)
	b.Missing(3)
	incomplete := b.Finish()

	f := NewFeed()
	all, cancelAll := f.Subscribe(10)
	defer cancelAll()
	one, _ := f.Subscribe(1)
	f.Publish([]Compaction{complete, incomplete})
	f.DropEvent()
	select {
	case <-f.Ready():
	default:
		t.Fatal("Publish did not signal Ready")
	}
	f.Deliver()
	require.Equal(t, 1, (<-all).JobID)
	require.Equal(t, 2, (<-all).JobID)
	require.Equal(t, 1, (<-one).JobID)
	require.Equal(t, Stats{Complete: 1, Incomplete: 1, DroppedEvents: 1, DroppedSubscriber: 1}, f.Stats())

	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(f.Collector(func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("lsmstats_"+name, help, labels, nil)
	})))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "lsmstats_compaction_entries_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "side" {
					got[lp.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	require.Equal(t, map[string]float64{"input": 2, "output": 1}, got, "the complete delta only")

	f.Close()
	_, open := <-all
	require.False(t, open)
	late, _ := f.Subscribe(1)
	_, open = <-late
	require.False(t, open, "a subscription after Close is closed")
}
