package lsm

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

var concurrentFor = flag.Duration("concurrent-for", 1500*time.Millisecond, "duration of TestConcurrent")

// TestConcurrent runs, at once and for -concurrent-for: four writers (one
// goroutine each, four vnodes each) whose epochs a committer commits, with
// a memory watermark low enough to spill; GC passes and manual compactions
// of vnode ranges (and Pebble's background compactions); readers of pinned
// and current epochs; statistics queries (Stats, EstimateRows, Partition, a
// Prometheus scrape, Metrics); and Verify. Under -race this is the store's
// data-race test. Every read and every estimate is checked against a model
// of each committed epoch, and the statistics against the model of the
// epoch they say they describe.
func TestConcurrent(t *testing.T) {
	seed := testSeed(t)
	const (
		writers = 4
		vnodes  = 16
		pks     = 480
	)
	s, err := Open(t.TempDir(), &Options{MemoryWatermark: 12 << 10, TargetFileSize: 16 << 10, Logger: QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	def := TableDef{ID: 1, VnodeCount: vnodes, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	def, err = s.Table(1)
	require.NoError(t, err)

	// models[e] is every live row at committed epoch e.
	var modelsMu sync.Mutex
	models := map[uint64]map[uint64]string{0: {}}
	modelAt := func(e uint64) map[uint64]string {
		modelsMu.Lock()
		defer modelsMu.Unlock()
		m, ok := models[e]
		require.True(t, ok, "no model of epoch %d", e)
		return m
	}

	// Each writer owns vnodes [4i, 4i+4) and the pks that hash there.
	owned := make([][]uint64, writers)
	for pk := uint64(0); pk < pks; pk++ {
		v := def.VnodeOf(keys.AppendUint64(nil, pk))
		owned[int(v)/(vnodes/writers)] = append(owned[int(v)/(vnodes/writers)], pk)
	}
	ws := make([]*Writer, writers)
	for i := range ws {
		vn := roaring.New()
		vn.AddRange(uint64(i*vnodes/writers), uint64((i+1)*vnodes/writers))
		ws[i], err = s.NewWriter(1, vn, nil)
		require.NoError(t, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
		cancel()
	}
	goFn := func(name string, f func(r *rand.Rand) error) {
		wg.Add(1)
		r := rand.New(rand.NewPCG(seed, uint64(len(name))))
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					report(fmt.Errorf("%s panicked: %v", name, p))
				}
			}()
			if err := f(r); err != nil && ctx.Err() == nil {
				report(errors.Wrap(err, name))
			}
		}()
	}
	var counts struct {
		commits, reads, estimates, partitions, scrapes, gcs, compactions, verifies atomic.Int64
	}

	// The writers and the committer: per epoch every writer writes a batch
	// of its pks and seals; the committer folds their changes into the
	// model of the epoch, then commits it.
	goFn("writers", func(r *rand.Rand) error {
		live := map[uint64]string{}
		for epoch := s.EpochFloor() + 1; ctx.Err() == nil; epoch++ {
			changes := make([]map[uint64]*string, writers)
			var wwg sync.WaitGroup
			werrs := make([]error, writers)
			for i := range ws {
				changes[i] = map[uint64]*string{}
				wr := rand.New(rand.NewPCG(seed, epoch*writers+uint64(i)))
				wwg.Add(1)
				go func() {
					defer wwg.Done()
					w := ws[i]
					for range 20 + wr.IntN(60) {
						pk := owned[i][wr.IntN(len(owned[i]))]
						k := keys.AppendUint64(nil, pk)
						vn := def.VnodeOf(k)
						cur, ok := live[pk]
						if c, seen := changes[i][pk]; seen {
							cur, ok = "", c != nil
							if c != nil {
								cur = *c
							}
						}
						row := fmt.Sprintf("e%d-%d-%x", epoch, pk, wr.Uint32())
						var err error
						switch {
						case !ok:
							err = w.Insert(epoch, vn, k, []byte(row))
							changes[i][pk] = &row
						case wr.IntN(3) == 0:
							err = w.Delete(epoch, vn, k, []byte(cur))
							changes[i][pk] = nil
						default:
							err = w.Update(epoch, vn, k, []byte(cur), []byte(row))
							changes[i][pk] = &row
						}
						if err != nil {
							werrs[i] = err
							return
						}
					}
					werrs[i] = w.Seal(epoch)
				}()
			}
			wwg.Wait()
			for _, err := range werrs {
				if err != nil {
					return err
				}
			}
			next := maps.Clone(live)
			for _, ch := range changes {
				for pk, row := range ch {
					if row == nil {
						delete(next, pk)
					} else {
						next[pk] = *row
					}
				}
			}
			modelsMu.Lock()
			models[epoch] = next
			modelsMu.Unlock()
			if err := s.Commit(epoch); err != nil {
				return err
			}
			live = next
			counts.commits.Add(1)
		}
		return nil
	})

	// Readers: a pinned snapshot of the committed epoch, or of an older
	// epoch still above the GC watermark, read in full and point by point.
	for i := range 2 {
		goFn(fmt.Sprintf("reader%d", i), func(r *rand.Rand) error {
			for ctx.Err() == nil {
				var sn *Snapshot
				var err error
				if c := s.CommittedEpoch(); r.IntN(2) == 0 && c > 4 {
					sn, err = s.Pin(c - uint64(r.IntN(4)))
					if errors.Is(err, ErrEpochUnavailable) {
						continue // collected meanwhile
					}
				} else {
					sn, err = s.Snapshot()
				}
				if err != nil {
					return err
				}
				want := modelAt(sn.Epoch())
				got := map[uint64]string{}
				for v := 0; v < vnodes; v++ {
					it, err := sn.NewIter(1, uint16(v), nil, nil)
					if err != nil {
						sn.Close()
						return err
					}
					for ok := it.First(); ok; ok = it.Next() {
						pk, _, _ := keys.DecodeUint64(it.PK())
						got[pk] = string(it.Row())
					}
					if err := it.Close(); err != nil {
						sn.Close()
						return err
					}
				}
				for range 10 {
					pk := uint64(r.IntN(pks))
					k := keys.AppendUint64(nil, pk)
					row, ok, err := sn.Get(1, def.VnodeOf(k), k)
					if err != nil {
						sn.Close()
						return err
					}
					if w, wok := want[pk]; ok != wok || string(row) != w {
						sn.Close()
						return fmt.Errorf("get of pk %d at epoch %d: %q %t, want %q %t", pk, sn.Epoch(), row, ok, w, wok)
					}
				}
				sn.Close()
				if !maps.Equal(want, got) {
					return fmt.Errorf("scan at epoch %d: %d rows, want %d", sn.Epoch(), len(got), len(want))
				}
				counts.reads.Add(1)
			}
			return nil
		})
	}

	// Statistics: per vnode and per pk range against the model of the epoch
	// the statistics describe; partitions; a Prometheus scrape.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(stats.NewMetrics(s.Stats, nil), s.Collector(nil))
	goFn("stats", func(r *rand.Rand) error {
		all := roaring.New()
		all.AddRange(0, vnodes)
		for ctx.Err() == nil {
			st := s.Stats()
			if st.PhysicalErr != nil {
				return st.PhysicalErr
			}
			want := modelAt(st.CommittedEpoch)
			perVnode := make([][][]byte, vnodes)
			for pk := range want {
				k := keys.AppendUint64(nil, pk)
				v := def.VnodeOf(k)
				perVnode[v] = append(perVnode[v], k)
			}
			for range 8 {
				v := uint16(r.IntN(vnodes))
				lo := keys.AppendUint64(nil, uint64(r.IntN(pks)))
				hi := keys.AppendUint64(nil, uint64(r.IntN(pks)))
				if bytes.Compare(lo, hi) > 0 {
					lo, hi = hi, lo
				}
				truth := 0
				for _, k := range perVnode[v] {
					if bytes.Compare(k, lo) >= 0 && bytes.Compare(k, hi) < 0 {
						truth++
					}
				}
				est := st.EstimateRows(1, v, lo, hi)
				if int64(truth) < est.Lower || int64(truth) > est.Upper {
					return fmt.Errorf("epoch %d vnode %d: %d rows in range, estimate %+v", st.CommittedEpoch, v, truth, est)
				}
				if got := st.Vnode(1, v).Live.Rows; got != int64(len(perVnode[v])) {
					return fmt.Errorf("epoch %d vnode %d: live rows %d, model %d", st.CommittedEpoch, v, got, len(perVnode[v]))
				}
				if p := st.Vnode(1, v).Physical; p.Entries < uint64(len(perVnode[v])) {
					return fmt.Errorf("epoch %d vnode %d: %d physical entries below %d live rows", st.CommittedEpoch, v, p.Entries, len(perVnode[v]))
				}
				counts.estimates.Add(1)
			}
			var sum int64
			for _, pr := range st.Partition(1, all, 1+r.IntN(6)) {
				sum += pr.Rows
			}
			if sum != int64(len(want)) {
				return fmt.Errorf("epoch %d: partitions hold %d rows, model %d", st.CommittedEpoch, sum, len(want))
			}
			counts.partitions.Add(1)
			if _, err := reg.Gather(); err != nil {
				return err
			}
			_ = s.Metrics()
			_, _ = s.PebbleMetrics()
			counts.scrapes.Add(1)
		}
		return nil
	})

	// Maintenance: GC passes and manual compactions of vnode ranges.
	goFn("maintenance", func(r *rand.Rand) error {
		for ctx.Err() == nil {
			lo := r.IntN(vnodes)
			hi := lo + 1 + r.IntN(vnodes-lo)
			if _, err := s.GC(ctx, GCRequest{Table: 1, VnodeLo: lo, VnodeHi: hi, BatchSize: 1 + r.IntN(100)}); err != nil {
				return err
			}
			counts.gcs.Add(1)
			if r.IntN(3) == 0 {
				if err := s.CompactRange(ctx, 1, lo, hi); err != nil {
					return err
				}
				counts.compactions.Add(1)
			}
		}
		return nil
	})

	goFn("verify", func(r *rand.Rand) error {
		for ctx.Err() == nil {
			rep, err := s.Verify()
			if err != nil {
				return err
			}
			if !rep.OK() {
				return fmt.Errorf("verify at epoch %d: %v", rep.Epoch, rep.Differences)
			}
			counts.verifies.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		return nil
	})

	select {
	case <-ctx.Done():
	case <-time.After(*concurrentFor):
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	t.Logf("commits %d, spills %d, full reads %d, estimates %d, partitions %d, scrapes %d, GC passes %d, compactions %d, verifies %d",
		counts.commits.Load(), s.Metrics().Spills, counts.reads.Load(), counts.estimates.Load(), counts.partitions.Load(),
		counts.scrapes.Load(), counts.gcs.Load(), counts.compactions.Load(), counts.verifies.Load())
	require.Positive(t, counts.commits.Load())
	require.Positive(t, counts.reads.Load())
	require.Positive(t, counts.gcs.Load())
	require.Positive(t, s.Metrics().Spills)
	for _, w := range ws {
		require.NoError(t, w.Close())
	}
	require.Equal(t, modelAt(s.CommittedEpoch()), readSnapOf(t, s, def))
	rep, err := s.Verify()
	require.NoError(t, err)
	require.Empty(t, rep.Differences)
}
