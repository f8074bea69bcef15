package lsm

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// Pebble panics when a compaction that elides a SINGLEDEL meets a read
// error (or a corrupt block) while it steps past the SET the SINGLEDEL
// deletes (compact.Iter.skipDueToSingleDeleteElision: panic(i.err)). GC
// writes SINGLEDELs, and CompactRange (or Pebble's own compactions) elide
// them. The panic is in Pebble's compaction goroutine: no caller can
// recover it, and the process ends. TestSingleDelElisionPanic provokes it
// on purpose in a child process and checks that the store recovers at
// reopen: the last checkpoint complete, Verify clean, and the compaction
// that panicked succeeds once the read does.

const (
	singleDelChildEnv = "LSMSTATS_LSM_SINGLEDEL_CHILD"
	singleDelFaultEnv = "LSMSTATS_LSM_SINGLEDEL_FAULT" // "file offset"
)

// readAtFault fails the reads of one file at one offset (a block's).
type readAtFault struct {
	file   string
	offset int64
}

func (f readAtFault) String() string { return fmt.Sprintf("read %s at %d", f.file, f.offset) }

func (f readAtFault) MaybeError(op errorfs.Op) error {
	if (op.Kind == errorfs.OpFileReadAt || op.Kind == errorfs.OpFileRead) && op.Offset == f.offset &&
		filepath.Base(op.Path) == f.file {
		return errorfs.ErrInjected
	}
	return nil
}

// singleDelChild opens the store in dir with reads of one block failing
// and compacts table 1 to the bottom level. It is expected to panic; if
// the compaction returns, it says so and exits with 0.
func singleDelChild(dir, fault string) {
	var f readAtFault
	if _, err := fmt.Sscanf(fault, "%s %d", &f.file, &f.offset); err != nil {
		testutil.ExitChild(err)
	}
	s, err := Open(dir, &Options{FS: errorfs.Wrap(vfs.Default, f), Logger: QuietLogger(io.Discard),
		Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }})
	if err != nil {
		testutil.ExitChild(err)
	}
	fmt.Println("compacting")
	err = s.CompactRange(context.Background(), 1, 0, 0)
	fmt.Printf("compaction returned: %v\n", err)
	os.Exit(0)
}

func TestSingleDelElisionPanic(t *testing.T) {
	dir := t.TempDir()
	o := &Options{Logger: QuietLogger(io.Discard), TargetFileSize: 16 << 10, CommitBatchBytes: -1,
		Pebble: func(o *pebble.Options) { o.DisableAutomaticCompactions = true }}
	s, err := Open(dir, o)
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	const n = 3000
	row := func(i, e uint64) []byte { return []byte(fmt.Sprintf("row %d of epoch %d", i, e)) }
	for i := range uint64(n) {
		pk := keys.AppendUint64(nil, i)
		require.NoError(t, w.Insert(1, 0, pk, row(i, 1)))
	}
	require.NoError(t, w.Seal(1))
	require.NoError(t, s.Commit(1)) // the bottom level: nothing overlaps it
	for i := range uint64(n) {
		pk := keys.AppendUint64(nil, i)
		require.NoError(t, w.Update(2, 0, pk, row(i, 1), row(i, 2)))
	}
	require.NoError(t, w.Seal(2))
	require.NoError(t, s.Commit(2))
	require.NoError(t, w.Close())
	// GC at the committed epoch: a SINGLEDEL for every epoch-1 version,
	// ingested above the SETs it deletes.
	res, err := s.GC(t.Context(), GCRequest{Table: 1})
	require.NoError(t, err)
	require.EqualValues(t, n, res.Deleted)
	// The first SST of epoch 1 in the bottom level; its second data block
	// is the one the compaction reads while it elides the SINGLEDEL of the
	// first block's last key.
	var target string
	levels, err := s.db.SSTables()
	require.NoError(t, err)
	for _, tbl := range levels[6] {
		k, err := keys.Decode(tbl.Smallest.UserKey)
		if err == nil && k.Table == 1 && k.Version.Epoch() == 1 && target == "" {
			target = fmt.Sprintf("%06d.sst", tbl.FileNum)
		}
	}
	require.NoError(t, s.Close())
	require.NotEmpty(t, target, "no epoch-1 SST in L6")
	blocks, err := faultfs.SSTBlocks(filepath.Join(dir, pebbleDir, target))
	require.NoError(t, err)
	var data []faultfs.Block
	for _, b := range blocks {
		if b.Kind == faultfs.BlockData {
			data = append(data, b)
		}
	}
	require.GreaterOrEqual(t, len(data), 3, "the SST must span blocks")

	var stderr strings.Builder
	c := testutil.StartChild(t, &stderr, singleDelChildEnv+"="+dir,
		singleDelFaultEnv+"="+target+" "+strconv.FormatInt(data[1].Offset, 10))
	var lines []string
	for l := range c.Lines() {
		lines = append(lines, l)
	}
	end := c.Wait()
	require.NoError(t, end.WaitErr())
	t.Logf("child: exit %d, output %q, stderr:\n%s", end.Code, lines, tail(stderr.String(), 1500))
	require.Equal(t, []string{"compacting"}, lines, "the compaction must not return")
	require.Equal(t, 2, end.Code, "a Go panic exits with 2")
	require.Contains(t, stderr.String(), "panic: ")
	require.Contains(t, stderr.String(), "injected error")
	require.Contains(t, stderr.String(), "skipDueToSingleDeleteElision")

	// Recovered at reopen: the last checkpoint is all there, Verify is clean,
	// and the compaction the panic cut short now succeeds.
	s, err = Open(dir, &Options{Logger: QuietLogger(io.Discard)})
	require.NoError(t, err)
	defer s.Close()
	require.Equal(t, uint64(2), s.CommittedEpoch())
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, n, rep.Rows)
	require.NoError(t, s.CompactRange(t.Context(), 1, 0, 0))
	it, err := s.NewIter(1, 0, nil, nil)
	require.NoError(t, err)
	var i uint64
	for ok := it.First(); ok; ok = it.Next() {
		require.Equal(t, keys.AppendUint64(nil, i), it.PK())
		require.Equal(t, row(i, 2), it.Row())
		i++
	}
	require.NoError(t, it.Close())
	require.EqualValues(t, n, i)
	st := s.Stats().Physical.Table(1)
	require.EqualValues(t, n, st.Counts.Entries, "the SINGLEDELs and the SETs they delete are gone")
	require.Zero(t, st.PebbleTombstones)
}
