package lsm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

var manifestSeed = flag.Uint64("manifest-seed", 0, "seed of TestScanRecordsMatchesPebble")

// TestScanRecordsMatchesPebble: the store's reading of a MANIFEST agrees
// with Pebble's own record reader on where the valid records end, over
// files of records of every size (one chunk, several, across blocks)
// written by Pebble's record writer and then damaged: bytes flipped or
// zeroed anywhere, or the file cut. Where a damaged record is followed by
// whole records the store finds the next one, and it never finds one after
// a cut.
func TestScanRecordsMatchesPebble(t *testing.T) {
	seed := testutil.Seed(t, "manifest-seed", *manifestSeed)
	r := rand.New(rand.NewPCG(seed, 41))
	for iter := range 200 {
		var buf bytes.Buffer
		w := record.NewWriter(&buf)
		n := 1 + r.IntN(100)
		var starts []int64 // of each record
		for range n {
			// Records of one chunk, and of two where they cross a block
			// boundary; records of three chunks or more (a middle chunk) in
			// one of every ten files. (Pebble's reader tries every bit flip
			// of a damaged chunk: a large one takes it a second.)
			size := r.IntN(2 << 10)
			if iter%10 == 0 && r.IntN(n) == 0 {
				size = recordBlockSize + r.IntN(2*recordBlockSize)
			}
			rec := make([]byte, size)
			for i := range rec {
				rec[i] = byte(r.Uint32())
			}
			_, err := w.WriteRecord(rec)
			require.NoError(t, err)
			off, err := w.LastRecordOffset()
			require.NoError(t, err)
			starts = append(starts, off)
		}
		require.NoError(t, w.Close())
		clean := buf.Bytes()
		sc := scanRecords(clean, 0)
		require.Equal(t, n, sc.records, "iteration %d: an undamaged file", iter)
		require.Equal(t, int64(len(clean)), sc.end, "iteration %d", iter)
		require.Equal(t, starts[n-1], sc.last, "iteration %d", iter)

		b := slices.Clone(clean)
		kind := r.IntN(3)
		off := r.IntN(len(b))
		switch kind {
		case 0: // flip
			for i := off; i < min(len(b), off+1+r.IntN(4)); i++ {
				b[i] ^= byte(1 + r.IntN(255))
			}
		case 1: // zero
			for i := off; i < min(len(b), off+1+r.IntN(64)); i++ {
				b[i] = 0
			}
		case 2: // cut
			b = b[:off]
		}
		got := scanManifest(b)
		require.Equal(t, pebbleRecords(b), got.scan.records, "iteration %d (seed %d): damage %d at %d", iter, seed, kind, off)
		if kind == 2 {
			require.Negative(t, got.resumes, "iteration %d: a cut file has nothing after its end", iter)
			continue
		}
		// Damage followed by a whole record is found: the first record after
		// the damaged one whose first chunk the damage left intact.
		want := int64(-1)
		for _, st := range starts[min(got.scan.records+1, n):] {
			if firstChunkIntact(clean, b, st) {
				want = st
				break
			}
		}
		require.Equal(t, want, got.resumes,
			"iteration %d (seed %d): damage %d at %d, in record %d of %d", iter, seed, kind, off, got.scan.records, n)
	}
}

// firstChunkIntact reports whether the first chunk of the record at start
// is the same in b as in clean.
func firstChunkIntact(clean, b []byte, start int64) bool {
	n := int64(binary.LittleEndian.Uint16(clean[start+4:]))
	end := start + chunkHeaderLen + n
	return end <= int64(len(b)) && bytes.Equal(clean[start:end], b[start:end])
}

// pebbleRecords counts the records Pebble's reader reads before it stops,
// as Pebble's MANIFEST replay does.
func pebbleRecords(b []byte) int {
	rr := record.NewReader(bytes.NewReader(b), 0)
	n := 0
	for {
		r, err := rr.Next()
		if err == nil {
			_, err = io.Copy(io.Discard, r)
		}
		if err != nil {
			return n
		}
		n++
	}
}

// historyStore writes a store whose MANIFEST holds many version edits:
// four tables written one after the other, each in checkpoints committed
// as batches, flushed from small memtables over several WALs, then
// compacted by a manual compaction. Automatic compactions are off, so that
// the SSTs of a version survive the edits after it until a compaction of
// their table: damage to the edits after the last compaction makes Pebble
// alone open an older version, silently. It returns the store's answers:
// its committed epoch, its rows and its live statistics.
func historyStore(t *testing.T, dir string) string {
	o := &Options{Logger: QuietLogger(io.Discard), TargetFileSize: 16 << 10, Pebble: func(po *pebble.Options) {
		po.MemTableSize = 256 << 10
		po.DisableAutomaticCompactions = true
	}}
	s, err := Open(dir, o)
	require.NoError(t, err)
	const tables, epochs = 4, 10
	r := rand.New(rand.NewPCG(7, 41))
	for tab := uint32(1); tab <= tables; tab++ {
		require.NoError(t, s.CreateTable(TableDef{ID: tab, VnodeCount: 16, PK: keys.Schema{keys.Uint64}}))
		def, err := s.Table(tab)
		require.NoError(t, err)
		w, err := s.NewWriter(tab, nil, nil)
		require.NoError(t, err)
		live := map[uint64][]byte{}
		next := uint64(0)
		for i := uint64(1); i <= epochs; i++ {
			e := uint64(tab-1)*epochs + i
			for range 400 {
				pk := keys.AppendUint64(nil, next)
				row := bytes.Repeat([]byte{byte(next)}, 40)
				require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, row))
				live[next] = row
				next++
			}
			for range 100 {
				id := r.Uint64N(next)
				old, ok := live[id]
				if !ok {
					continue
				}
				pk := keys.AppendUint64(nil, id)
				if r.IntN(3) == 0 {
					require.NoError(t, w.Delete(e, def.VnodeOf(pk), pk, old))
					delete(live, id)
					continue
				}
				row := fmt.Appendf(nil, "updated at %d", e)
				require.NoError(t, w.Update(e, def.VnodeOf(pk), pk, old, row))
				live[id] = row
			}
			require.NoError(t, w.Seal(e))
			require.NoError(t, s.Commit(e))
		}
		require.NoError(t, w.Close())
		if tab < tables {
			require.NoError(t, s.CompactRange(context.Background(), tab, 0, 0))
		}
	}
	answers := storeAnswers(t, s)
	require.NoError(t, s.Close())
	return answers
}

// storeAnswers is what a store answers: its committed epoch, a digest of
// the rows of every vnode and the live statistics of every vnode.
func storeAnswers(t *testing.T, s *Store) string {
	var b strings.Builder
	fmt.Fprintf(&b, "committed %d\n", s.CommittedEpoch())
	live := s.Stats().Live
	for _, def := range s.Tables() {
		for v := range def.VnodeCount {
			it, err := s.NewIter(def.ID, uint16(v), nil, nil)
			require.NoError(t, err)
			h := fnv.New64a()
			n, err := testutil.DigestRows(h, it)
			require.NoError(t, err)
			lc := live.Vnode(def.ID, uint16(v))
			fmt.Fprintf(&b, "table %d vnode %d: %d rows %x, live %d/%d\n", def.ID, v, n, h.Sum64(), lc.Rows, lc.Bytes)
		}
	}
	return b.String()
}

// TestManifestRollback damages the MANIFEST of a store with a long history
// at offsets spread over its whole length and opens the damaged store,
// read-only and writable. Each open either answers exactly as the
// undamaged store (committed epoch, rows and live statistics of every
// vnode) or refuses with an error marked lsmstats.ErrCorruption that names
// the MANIFEST, and changes no file. Where Pebble alone opens the damaged
// MANIFEST at another version — the silent rollback — the store must
// refuse; RepairManifest then restores the MANIFEST from the store's copy,
// and the store answers as the undamaged one.
func TestManifestRollback(t *testing.T) {
	base := filepath.Join(t.TempDir(), "store")
	want := historyStore(t, base)
	manifest := onlyManifest(t, base)
	size := fileSize(t, manifest)
	clean := pebbleVersion(t, base)
	require.Greater(t, size, int64(4<<10), "the MANIFEST holds few edits")

	const injections = 48
	var same, refused, rollbacks, repaired int
	for i := range injections {
		off := size * int64(i) / injections
		dir := filepath.Join(t.TempDir(), "damaged")
		require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
		flipBytes(t, filepath.Join(dir, pebbleDir, filepath.Base(manifest)), off, 3)
		desc := fmt.Sprintf("3 bytes flipped at %d of %d", off, size)

		// What Pebble alone opens.
		if v, ok := pebbleVersionOrFail(dir); ok && v != clean {
			rollbacks++
		}
		before := dirState(t, dir)
		outcome := ""
		for _, readOnly := range []bool{true, false} {
			s, err := Open(dir, &Options{ReadOnly: readOnly, Logger: QuietLogger(io.Discard)})
			if err != nil {
				require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%s: %v", desc, err)
				require.Contains(t, err.Error(), "MANIFEST-", "%s", desc)
				require.Equal(t, before, dirState(t, dir), "%s: a refused open changed files", desc)
				outcome += "refused "
				continue
			}
			require.Equal(t, want, storeAnswers(t, s), "%s: the store opened with other answers", desc)
			require.NoError(t, s.Close())
			outcome += "same "
		}
		switch outcome {
		case "same same ":
			same++
			continue
		case "refused refused ":
			refused++
		default:
			t.Fatalf("%s: read-only and writable opens disagree: %s", desc, outcome)
		}
		ok, err := RepairManifest(dir, &Options{Logger: QuietLogger(io.Discard)})
		require.NoError(t, err, "%s", desc)
		require.True(t, ok, "%s", desc)
		s, err := Open(dir, &Options{Logger: QuietLogger(io.Discard)})
		require.NoError(t, err, "%s: after the repair", desc)
		require.Equal(t, want, storeAnswers(t, s), "%s: after the repair", desc)
		rep, err := s.Verify()
		require.NoError(t, err)
		require.True(t, rep.OK(), "%s: %+v", desc, rep)
		require.NoError(t, s.Close())
		repaired++
	}
	t.Logf("MANIFEST of %d bytes, %d injections: %d opened as the undamaged store, %d refused (all %d repaired "+
		"from the store's copy); Pebble alone opened another version %d times", size, injections, same, refused, repaired, rollbacks)
	require.Positive(t, rollbacks, "no injection made Pebble open another version: the test shows nothing")
	require.GreaterOrEqual(t, refused, rollbacks)
}

func onlyManifest(t *testing.T, dir string) string {
	m, err := filepath.Glob(filepath.Join(dir, pebbleDir, "MANIFEST-*"))
	require.NoError(t, err)
	require.Len(t, m, 1)
	return m[0]
}

func fileSize(t *testing.T, path string) int64 {
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Size()
}

func flipBytes(t *testing.T, path string, off int64, n int) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for i := off; i < min(off+int64(n), int64(len(b))); i++ {
		b[i] ^= 0xff
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// pebbleVersion lists the SSTs of the version Pebble opens in the store in
// dir, read-only.
func pebbleVersion(t *testing.T, dir string) string {
	v, ok := pebbleVersionOrFail(dir)
	require.True(t, ok)
	return v
}

func pebbleVersionOrFail(dir string) (string, bool) {
	db, err := pebble.Open(filepath.Join(dir, pebbleDir), &pebble.Options{
		Comparer: keys.Comparer, ReadOnly: true, Logger: QuietLogger(io.Discard)})
	if err != nil {
		return "", false
	}
	defer db.Close()
	levels, err := db.SSTables()
	if err != nil {
		return "", false
	}
	var b strings.Builder
	for l, files := range levels {
		for _, f := range files {
			fmt.Fprintf(&b, "L%d %s\n", l, f.FileNum)
		}
	}
	return b.String(), true
}

// TestRefusedOpenKeepsFiles: a writable Open that refuses what Pebble
// recovered leaves every file Pebble would have removed while it opened.
// The store is a crash image (copied while open) whose last checkpoints
// are in the WAL only; Pebble replays and flushes them at Open and then
// removes the WAL. With a checkpoint mark ahead of the committed epoch
// (a checkpoint Pebble did not recover) Open refuses, and the WAL must
// still be there; with the true mark Open accepts, and Pebble's removal
// goes ahead.
func TestRefusedOpenKeepsFiles(t *testing.T) {
	src := t.TempDir()
	s, err := Open(src, &Options{Logger: QuietLogger(io.Discard)})
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 4, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	def, err = s.Table(1)
	require.NoError(t, err)
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for e := uint64(1); e <= 3; e++ {
		for i := range uint64(100) {
			pk := keys.AppendUint64(nil, e*1000+i)
			require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, []byte("row")))
		}
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
	}
	image := filepath.Join(t.TempDir(), "image")
	require.NoError(t, os.CopyFS(image, os.DirFS(src)))
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	wals, err := filepath.Glob(filepath.Join(image, pebbleDir, "*.log"))
	require.NoError(t, err)
	require.NotEmpty(t, wals)

	for _, ahead := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "store")
		require.NoError(t, os.CopyFS(dir, os.DirFS(image)))
		require.NoError(t, os.WriteFile(filepath.Join(dir, markName), encodeMark(mark{epoch: 3 + b2u(ahead)}), 0o644))
		s, err := Open(dir, &Options{Logger: QuietLogger(io.Discard)})
		kept := 0
		for _, wal := range wals {
			if _, err := os.Stat(filepath.Join(dir, pebbleDir, filepath.Base(wal))); err == nil {
				kept++
			}
		}
		if ahead {
			require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)
			require.ErrorContains(t, err, "opens at committed epoch 3, but its checkpoint mark (CHECKPOINT) says epoch 4")
			require.Equal(t, len(wals), kept, "a refused open removed a WAL")
			continue
		}
		require.NoError(t, err)
		require.Equal(t, uint64(3), s.CommittedEpoch())
		require.NoError(t, s.Close())
		require.Less(t, kept, len(wals), "Pebble removed no WAL after it flushed the replayed one: the test shows nothing")
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestMarkLayouts pins the checkpoint mark's bytes (docs/format.md, "The
// checkpoint mark"): the layout this version writes, and the first layout,
// which it still reads.
func TestMarkLayouts(t *testing.T) {
	m := mark{epoch: 125, manifest: 1, synced: 18448}
	b := encodeMark(m)
	require.Equal(t, "6c736332"+"000000000000007d"+"0000000000000001"+"0000000000004810"+"7474ee53", fmt.Sprintf("%x", b))
	got, err := decodeMark(b)
	require.NoError(t, err)
	require.Equal(t, m, got)

	v1, err := hex.DecodeString("6c73636b" + "000000000000007d" + "3077a5cc")
	require.NoError(t, err)
	got, err = decodeMark(v1)
	require.NoError(t, err, "a mark of the first layout reads")
	require.Equal(t, mark{epoch: 125}, got)

	for i := range b {
		d := slices.Clone(b)
		d[i] ^= 0x10
		_, err := decodeMark(d)
		require.True(t, errors.Is(err, lsmstats.ErrCorruption), "byte %d flipped: %v", i, err)
	}
	_, err = decodeMark(b[:markLen-1])
	require.True(t, errors.Is(err, lsmstats.ErrCorruption))
}
