package testutil

import (
	"fmt"
	"maps"
	"testing"

	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// tableWriter is a table as a map, which checks every op against it the
// way a checked lsm.Writer does: inserts of absent pks, updates and
// deletes of live ones with their current row.
type tableWriter map[uint64]string

func (w tableWriter) check(vnode uint16, pk []byte, old *string) (uint64, error) {
	v, _, err := keys.DecodeUint64(pk)
	if err != nil {
		return 0, err
	}
	if vnode != uint16(v%4) {
		return 0, fmt.Errorf("pk %d in vnode %d", v, vnode)
	}
	cur, live := w[v]
	switch {
	case old == nil && live:
		return 0, fmt.Errorf("insert of live pk %d", v)
	case old != nil && !live:
		return 0, fmt.Errorf("update or delete of absent pk %d", v)
	case old != nil && *old != cur:
		return 0, fmt.Errorf("pk %d: old row %q, table has %q", v, *old, cur)
	}
	return v, nil
}

func (w tableWriter) Insert(_ uint64, vnode uint16, pk, row []byte) error {
	v, err := w.check(vnode, pk, nil)
	w[v] = string(row)
	return err
}

func (w tableWriter) Update(_ uint64, vnode uint16, pk, old, row []byte) error {
	o := string(old)
	v, err := w.check(vnode, pk, &o)
	w[v] = string(row)
	return err
}

func (w tableWriter) Delete(_ uint64, vnode uint16, pk, old []byte) error {
	o := string(old)
	v, err := w.check(vnode, pk, &o)
	delete(w, v)
	return err
}

// TestChurn: both kinds of churn write consistent ops whose rows Live
// follows, with the mix asked for; Reset takes rows back; one seed gives
// the same ops.
func TestChurn(t *testing.T) {
	vnodeOf := func(pk []byte) uint16 { v, _, _ := keys.DecodeUint64(pk); return uint16(v % 4) }
	w := tableWriter{}
	c := NewChurn(7, vnodeOf)
	var kinds [3]int
	for epoch := uint64(1); epoch <= 50; epoch++ {
		ops, err := c.Write(w, epoch, 100, 30, 20)
		require.NoError(t, err)
		require.Len(t, ops, 100)
		for _, op := range ops {
			kinds[op.Kind]++
		}
		require.Equal(t, map[uint64]string(w), c.Live(), "epoch %d", epoch)
	}
	require.InDelta(t, 2500, kinds[OpInsert], 250, "inserts %v", kinds)
	require.InDelta(t, 1500, kinds[OpUpdate], 250, "updates %v", kinds)
	require.InDelta(t, 1000, kinds[OpDelete], 250, "deletes %v", kinds)

	// A crash drops the last epochs: the generator goes on from the rows
	// that were committed.
	committed := maps.Clone(c.Live())
	_, err := c.Write(w, 51, 100, 30, 20)
	require.NoError(t, err)
	for pk := range w {
		delete(w, pk)
	}
	maps.Copy(w, committed)
	c.Reset(committed)
	for epoch := uint64(51); epoch <= 60; epoch++ {
		ops, err := c.Toggle(w, epoch, 100, 300)
		require.NoError(t, err)
		for _, op := range ops {
			require.Less(t, op.PK, uint64(300))
		}
		require.Equal(t, map[uint64]string(w), c.Live(), "epoch %d", epoch)
	}

	again := NewChurn(7, vnodeOf)
	a, err := again.Write(tableWriter{}, 1, 100, 30, 20)
	require.NoError(t, err)
	b, err := NewChurn(7, vnodeOf).Write(tableWriter{}, 1, 100, 30, 20)
	require.NoError(t, err)
	require.Equal(t, a, b)
}
