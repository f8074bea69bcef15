package backfill_test

import (
	"context"
	"testing"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/backfill"
	"github.com/lsmstats/lsmstats/bench/genjob"
	"github.com/lsmstats/lsmstats/bench/workload"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/lsm"
	"github.com/stretchr/testify/require"
)

// TestOpenJobBadState writes rows that do not decode into the backfill
// state table and the job's metadata table, as a bug or a bad tool would,
// and opens the job: OpenJob fails with ErrCorruptState or ErrCorruptMeta
// naming the row, and releases the writers it took, so the store goes on
// (writers on the job's tables, commits) and the job opens and finishes once
// the row is repaired. Before the fix a failed OpenJob left its upstream,
// metadata and actor writers registered: their vnodes could not be taken
// again and every later commit failed with ErrNotSealed.
func TestOpenJobBadState(t *testing.T) {
	p, err := workload.Preset("mixed", 2000, 8, 1)
	require.NoError(t, err)
	p.BatchRows = 500
	p.DuringSteps = 4
	s, err := lsm.Open(t.TempDir(), &lsm.Options{Logger: lsm.QuietLogger(nil)})
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	const upstream, mv, state, meta = 1, 2, 3, 4
	cfg := func() backfill.JobConfig {
		g, err := workload.New(p)
		require.NoError(t, err)
		return backfill.JobConfig{Store: s, Upstream: p.TableDef(upstream), MV: mv, State: state, Meta: meta,
			Actors: 2, ChunkSize: 16, BarrierRows: 40, Source: genjob.Source{G: g}}
	}
	j, err := backfill.OpenJob(cfg())
	require.NoError(t, err)
	for !j.Started() {
		_, _, err := j.Step(context.Background())
		require.NoError(t, err)
	}
	_, _, err = j.Step(context.Background())
	require.NoError(t, err)
	require.NoError(t, j.Close())

	// overwrite replaces one row through a writer of its own and commits it,
	// and returns the row it replaced.
	overwrite := func(table uint32, vnode uint16, pk, row []byte) []byte {
		old, ok, err := s.Get(table, vnode, pk)
		require.NoError(t, err)
		require.True(t, ok, "table %d vnode %d has no row", table, vnode)
		vn := roaring.New()
		vn.Add(uint32(vnode))
		w, err := s.NewWriter(table, vn, nil)
		require.NoError(t, err)
		e := s.EpochFloor() + 1
		require.NoError(t, w.Update(e, vnode, pk, old, row))
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
		require.NoError(t, w.Close())
		return old
	}
	// Vnode 4 is the first of the second actor's: started by the first
	// barrier in either snapshot order.
	statePK := keys.AppendUint64(nil, 4)
	valid, ok, err := s.Get(state, 4, statePK)
	require.NoError(t, err)
	require.True(t, ok)
	metaPK := keys.AppendUint64(nil, 1)
	for _, c := range []struct {
		name   string
		table  uint32
		vnode  uint16
		pk     []byte
		row    []byte
		want   error
		detail string
	}{
		{"state: unknown version", state, 4, statePK, []byte{9, 9, 9}, backfill.ErrCorruptState, "vnode 4: unknown version 9"},
		{"state: truncated", state, 4, statePK, []byte{1, 0}, backfill.ErrCorruptState, "vnode 4: truncated"},
		{"state: unknown flags", state, 4, statePK, []byte{1, 0x80, 0}, backfill.ErrCorruptState, "unknown flags"},
		{"state: cursor past the row", state, 4, statePK, []byte{1, 0, 9, 1}, backfill.ErrCorruptState, "cursor length"},
		{"state: trailing bytes", state, 4, statePK, append(append([]byte(nil), valid...), 0), backfill.ErrCorruptState, "trailing bytes"},
		{"state: cursor of another schema", state, 4, statePK,
			backfill.EncodeState(backfill.VnodeState{Vnode: 4, Cursor: []byte{1, 2, 3}}, true), backfill.ErrCorruptState, "cursor"},
		{"job metadata: unknown version", meta, 0, metaPK, []byte{9}, backfill.ErrCorruptMeta, "unknown version"},
		{"job metadata: truncated", meta, 0, metaPK, []byte{1, 5}, backfill.ErrCorruptMeta, "barrier"},
	} {
		old := overwrite(c.table, c.vnode, c.pk, c.row)
		_, err := backfill.OpenJob(cfg())
		require.Error(t, err, c.name)
		require.True(t, errors.Is(err, c.want), "%s: %v", c.name, err)
		require.Contains(t, err.Error(), c.detail, c.name)
		if c.name == "state: cursor of another schema" {
			require.True(t, errors.Is(err, keys.ErrInvalidPK), "%s: %v", c.name, err)
		}
		// The failed OpenJob holds no writer: the upstream table's vnodes
		// can be taken and a commit goes through.
		w, err := s.NewWriter(upstream, nil, nil)
		require.NoError(t, err, "%s: a writer of the failed job is still open", c.name)
		require.NoError(t, w.Close())
		overwrite(c.table, c.vnode, c.pk, old)
	}
	j, err = backfill.OpenJob(cfg())
	require.NoError(t, err)
	res, err := j.Run(context.Background())
	require.NoError(t, err)
	require.True(t, res.Finished)
	require.NoError(t, j.Compare())
	require.NoError(t, j.Close())
}
