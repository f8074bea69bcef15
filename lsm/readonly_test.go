package lsm

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/ssttracker"
	"github.com/lsmstats/lsmstats/internal/statsinternal"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// smallStore builds a closed store in a new directory: one table of one
// vnode (key order is pk order) and three epochs of 500 inserts each, with
// pks 10000+i, 20000+i and 30000+i, and returns the directory.
// With noCompactions Pebble compacts nothing, so the MANIFEST's last edits
// are the commits' ingestions.
//
// Commits cut their SSTs at 8 KiB: each epoch's rows span SSTs that hold
// table data only, apart from the last one, which also holds the metadata.
func smallStore(t *testing.T, noCompactions bool) string {
	t.Helper()
	dir := t.TempDir()
	o := &Options{Logger: QuietLogger(io.Discard), TargetFileSize: 8 << 10, CommitBatchBytes: -1}
	if noCompactions {
		o.Pebble = func(po *pebble.Options) { po.DisableAutomaticCompactions = true }
	}
	s, err := Open(dir, o)
	require.NoError(t, err)
	def := TableDef{ID: 1, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}
	require.NoError(t, s.CreateTable(def))
	w, err := s.NewWriter(1, nil, nil)
	require.NoError(t, err)
	for e := uint64(1); e <= 3; e++ {
		for i := range uint64(500) {
			pk := keys.AppendUint64(nil, e*10000+i)
			require.NoError(t, w.Insert(e, def.VnodeOf(pk), pk, []byte(fmt.Sprintf("row %d at %d", i, e))))
		}
		require.NoError(t, w.Seal(e))
		require.NoError(t, s.Commit(e))
	}
	require.NoError(t, w.Close())
	require.NoError(t, s.Close())
	return dir
}

// dirState is every file and directory under root with its size, content
// hash and modification time — except the modification time of Pebble's
// LOCK file, which Pebble opens to lock the directory, read-only too.
func dirState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			out[rel+"/"] = "dir"
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		st, err := d.Info()
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%d %x", len(b), sha256.Sum256(b))
		if d.Name() != "LOCK" {
			out[rel] += " " + st.ModTime().String()
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func roOpen(dir string) (*Store, error) {
	return Open(dir, &Options{ReadOnly: true, Logger: QuietLogger(io.Discard)})
}

// TestReadOnly: a read-only store reads, reports statistics and verifies,
// refuses every write with ErrReadOnly, and leaves its directory exactly as
// it was: no staging directory, no file created, changed or touched.
func TestReadOnly(t *testing.T) {
	dir := smallStore(t, false)
	before := dirState(t, dir)
	_, err := os.Stat(filepath.Join(dir, stagingDir))
	require.True(t, os.IsNotExist(err), "Close removed the staging directory")

	s, err := roOpen(dir)
	require.NoError(t, err)
	require.Equal(t, uint64(3), s.CommittedEpoch())
	def, err := s.Table(1)
	require.NoError(t, err)
	pk := keys.AppendUint64(nil, 20007)
	row, ok, err := s.Get(1, def.VnodeOf(pk), pk)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "row 7 at 2", string(row))
	snap, err := s.Pin(1)
	require.NoError(t, err)
	_, ok, err = snap.Get(1, def.VnodeOf(pk), pk)
	require.NoError(t, err)
	require.False(t, ok, "epoch 1 predates the row")
	snap.Close()
	require.EqualValues(t, 1500, s.Stats().Live.Table(1).Rows)
	require.NoError(t, s.Stats().PhysicalErr)
	require.EqualValues(t, 1500, s.Stats().Physical.Table(1).Counts.Puts)
	rep, err := s.Verify()
	require.NoError(t, err)
	require.True(t, rep.OK(), "%+v", rep)
	require.EqualValues(t, 1500, rep.Rows)

	// Every write is refused.
	ro := func(err error) {
		t.Helper()
		require.True(t, errors.Is(err, ErrReadOnly), "%v", err)
	}
	ro(s.CreateTable(TableDef{ID: 2, VnodeCount: 1, PK: keys.Schema{keys.Uint64}}))
	_, err = s.NewWriter(1, nil, nil)
	ro(err)
	ro(s.Commit(4))
	_, _, err = s.RecomputeLiveStats(1)
	ro(err)
	_, err = s.GC(t.Context(), GCRequest{Table: 1})
	ro(err)
	require.NoError(t, s.Close())

	require.Equal(t, before, dirState(t, dir), "a read-only open changed the directory")
}

// TestOpenNoStore: read-only and MustExist opens refuse a path that holds
// no store, with ErrNoStore and a message naming the path, and create
// nothing there; read-only opens also refuse a store of a newer format and
// one of another comparer.
func TestOpenNoStore(t *testing.T) {
	root := t.TempDir()
	empty := filepath.Join(root, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	emptyDB := filepath.Join(root, "emptydb")
	require.NoError(t, os.MkdirAll(filepath.Join(emptyDB, pebbleDir), 0o755))
	file := filepath.Join(root, "file")
	require.NoError(t, os.WriteFile(file, []byte("not a store"), 0o644))
	// A store's own Pebble directory, given for the store: the message
	// names the store.
	store := filepath.Join(root, "store")
	require.NoError(t, os.CopyFS(store, os.DirFS(smallStore(t, false))))
	before := dirState(t, root)
	for _, c := range []struct{ dir, want string }{
		{filepath.Join(root, "mistyped"), "does not exist"},
		{filepath.Join(root, "a", "b"), "does not exist"},
		{empty, "holds no store (it has no db directory)"},
		{emptyDB, "holds no Pebble MANIFEST"},
		{file, "is not a directory"},
		{filepath.Join(file, "x"), "is not a directory"},
		{filepath.Join(store, pebbleDir), "it is a store's Pebble directory: the store is " + store},
	} {
		for _, o := range []*Options{{ReadOnly: true}, {MustExist: true}} {
			o.Logger = QuietLogger(io.Discard)
			_, err := Open(c.dir, o)
			require.True(t, errors.Is(err, ErrNoStore), "%s: %v", c.dir, err)
			require.Contains(t, err.Error(), c.dir)
			require.Contains(t, err.Error(), c.want)
		}
	}
	require.Equal(t, before, dirState(t, root), "a refused open left files behind")

	// A store of a newer format, and one of another comparer.
	dir := smallStore(t, false)
	s, err := Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.db.Set(keys.MetaKey([]byte(keys.FormatVersionName)), be64(FormatVersion+1), pebble.Sync))
	require.NoError(t, s.Close())
	_, err = roOpen(dir)
	require.True(t, errors.Is(err, ErrFormatTooNew), "%v", err)

	other := t.TempDir()
	db, err := pebble.Open(filepath.Join(other, pebbleDir), &pebble.Options{Logger: QuietLogger(io.Discard)})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("k"), []byte("v"), pebble.Sync))
	require.NoError(t, db.Close())
	_, err = roOpen(other)
	require.ErrorContains(t, err, "another comparer")
	require.ErrorContains(t, err, `"leveldb.BytewiseComparator"`)
	require.False(t, lsmstats.IsCorruption(err), "another comparer is not corruption: %v", err)
}

// TestReadOnlyCorruptMetadata: metadata rows that do not decode fail a
// writable Open with errCorruptMetadata, which is lsmstats.ErrCorruption.
// A read-only Open leaves out the rows it can do without, and Verify
// reports each one by its key; the rows it cannot do without fail both.
func TestReadOnlyCorruptMetadata(t *testing.T) {
	bucket := keys.MetaKey(append([]byte("live/\x00\x00\x00\x01\x00\x00"), 0))
	for _, c := range []struct {
		name     string
		key      []byte
		value    []byte
		readable bool // a read-only open goes on
	}{
		{"live-bucket", bucket, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true},
		{"catalog", keys.CatalogKey(1), []byte{9}, true},
		{"gc-epoch", keys.MetaKey([]byte(gcEpochName)), []byte{1, 2}, true},
		{"hwm", keys.MetaKey([]byte(hwmName)), []byte{1}, true},
		{"committed-epoch", keys.MetaKey([]byte(keys.CommittedEpochName)), []byte{1, 2, 3}, false},
		{"format-version", keys.MetaKey([]byte(keys.FormatVersionName)), nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := smallStore(t, false)
			s, err := Open(dir, nil)
			require.NoError(t, err)
			require.NoError(t, s.db.Set(c.key, c.value, pebble.Sync))
			require.NoError(t, s.Close())

			_, err = Open(dir, &Options{Logger: QuietLogger(io.Discard)})
			require.True(t, errors.Is(err, errCorruptMetadata), "%v", err)
			require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)

			log := &recordingLogger{}
			s, err = Open(dir, &Options{ReadOnly: true, Logger: log})
			if !c.readable {
				require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)
				return
			}
			require.NoError(t, err)
			defer s.Close()
			require.Contains(t, log.text(), "left out (read-only)")
			rep, err := s.Verify()
			require.NoError(t, err)
			require.False(t, rep.OK())
			require.Len(t, rep.Corrupt, 1, "%+v", rep)
			require.Contains(t, rep.Corrupt[0], "metadata row")
			switch c.name {
			case "live-bucket":
				require.Contains(t, rep.Corrupt[0], fmt.Sprintf("%x", c.key))
				// Vnode 0's first bucket is missing: its counts differ from a
				// scan, and Verify says so.
				require.NotEmpty(t, rep.Differences)
				require.Contains(t, strings.Join(rep.Differences, "\n"), "table 1 vnode 0")
				// The store says which counts are incomplete.
				require.True(t, s.LiveIncomplete(1, 0))
				require.False(t, s.LiveIncomplete(1, 1))
				require.False(t, s.LiveIncomplete(2, 0))
			case "catalog":
				require.Contains(t, rep.Corrupt[0], "catalog entry of table 1")
				require.Empty(t, s.Tables(), "the table is left out")
			case "gc-epoch":
				// The watermark is unknown: only the committed epoch reads.
				_, err := s.Pin(2)
				require.True(t, errors.Is(err, ErrEpochUnavailable), "%v", err)
				snap, err := s.Pin(3)
				require.NoError(t, err)
				snap.Close()
			}
		})
	}
}

// TestCheckpointMark: a store whose MANIFEST lost its last edits opens at
// an older checkpoint in Pebble's eyes; the checkpoint mark refuses it
// with a corruption error. A damaged mark says nothing: a writable store
// writes a new one, a read-only store reports it.
func TestCheckpointMark(t *testing.T) {
	t.Run("manifest-cut", func(t *testing.T) {
		base := smallStore(t, true)
		manifests, err := filepath.Glob(filepath.Join(base, pebbleDir, "MANIFEST-*"))
		require.NoError(t, err)
		require.Len(t, manifests, 1)
		st, err := os.Stat(manifests[0])
		require.NoError(t, err)
		refused := 0
		// Cut the MANIFEST at every length from its end down to a quarter
		// of it: every open that does not see epoch 3 must be refused.
		for n := st.Size() - 1; n >= st.Size()/4; n -= 7 {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
			m := filepath.Join(dir, pebbleDir, filepath.Base(manifests[0]))
			require.NoError(t, os.Truncate(m, n))
			for _, readOnly := range []bool{true, false} {
				s, err := Open(dir, &Options{ReadOnly: readOnly, Logger: QuietLogger(io.Discard)})
				if err != nil {
					require.True(t, lsmstats.IsCorruption(err), "cut at %d: %v", n, err)
					require.True(t, errors.Is(err, lsmstats.ErrCorruption), "cut at %d: %v", n, err)
					refused++
					continue
				}
				require.Equal(t, uint64(3), s.CommittedEpoch(), "cut at %d opened at an older checkpoint", n)
				require.NoError(t, s.Close())
			}
		}
		require.Positive(t, refused)
	})
	// A MANIFEST damaged near its start opens as a Pebble database without
	// any of the store's metadata (found by TestCorruption: it was refused
	// as "no store", and a writable open would initialise a new store over
	// it). A record after the damage, or the checkpoint mark's synced
	// bytes, tell before Pebble reads it; a cut MANIFEST beside a damaged
	// mark is refused once Pebble opened it without the store's metadata.
	t.Run("manifest-start", func(t *testing.T) {
		base := smallStore(t, true)
		manifests, err := filepath.Glob(filepath.Join(base, pebbleDir, "MANIFEST-*"))
		require.NoError(t, err)
		require.Len(t, manifests, 1)
		for _, c := range []struct {
			damage      func(string)
			markDamaged bool
			want        []string
		}{
			{func(p string) { _, err := faultfs.Damage(p, faultfs.Zero, 72, 5); require.NoError(t, err) }, false,
				[]string{"is damaged at byte 42 of", "the store had committed epoch 3"}},
			{func(p string) { _, err := faultfs.Damage(p, faultfs.Zero, 72, 5); require.NoError(t, err) }, true,
				[]string{"is damaged at byte 42 of"}},
			{func(p string) { require.NoError(t, os.Truncate(p, 80)) }, false,
				[]string{"holds valid records only up to byte 42 of 80, but the checkpoint mark says"}},
			{func(p string) { require.NoError(t, os.Truncate(p, 80)) }, true,
				[]string{"holds none of the store's metadata", "does not decode"}},
		} {
			dir := t.TempDir()
			require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
			c.damage(filepath.Join(dir, pebbleDir, filepath.Base(manifests[0])))
			if c.markDamaged {
				_, err := faultfs.Damage(filepath.Join(dir, markName), faultfs.Flip, 6, 1)
				require.NoError(t, err)
			}
			before := dirState(t, dir)
			for _, readOnly := range []bool{true, false} {
				_, err := Open(dir, &Options{ReadOnly: readOnly, Logger: QuietLogger(io.Discard)})
				require.True(t, errors.Is(err, lsmstats.ErrCorruption), "read-only %v: %v", readOnly, err)
				for _, w := range c.want {
					require.ErrorContains(t, err, w)
				}
				if readOnly {
					require.Equal(t, before, dirState(t, dir))
				}
			}
		}
	})
	t.Run("mark-damaged", func(t *testing.T) {
		dir := smallStore(t, false)
		p := filepath.Join(dir, markName)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Len(t, b, markLen)
		m, err := decodeMark(b)
		require.NoError(t, err)
		require.Equal(t, uint64(3), m.epoch)
		b[6] ^= 1
		require.NoError(t, os.WriteFile(p, b, 0o644))

		s, err := roOpen(dir)
		require.NoError(t, err)
		rep, err := s.Verify()
		require.NoError(t, err)
		require.Len(t, rep.Corrupt, 1)
		require.Contains(t, rep.Corrupt[0], "checkpoint mark CHECKPOINT does not decode")
		require.NoError(t, s.Close())

		s, err = Open(dir, &Options{Logger: QuietLogger(io.Discard)})
		require.NoError(t, err)
		require.NoError(t, s.Close())
		b, err = os.ReadFile(p)
		require.NoError(t, err)
		m, err = decodeMark(b)
		require.NoError(t, err, "a writable open rewrote the mark")
		require.Equal(t, uint64(3), m.epoch)
	})
	t.Run("mark-ahead", func(t *testing.T) {
		dir := smallStore(t, false)
		require.NoError(t, os.WriteFile(filepath.Join(dir, markName), encodeMark(mark{epoch: 4}), 0o644))
		for _, readOnly := range []bool{true, false} {
			_, err := Open(dir, &Options{ReadOnly: readOnly, Logger: QuietLogger(io.Discard)})
			require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)
			require.ErrorContains(t, err, "opens at committed epoch 3, but its checkpoint mark (CHECKPOINT) says epoch 4 was committed")
		}
	})
}

// TestCorruptSST: a corrupt data block and a corrupt properties block are
// reported, never fatal. Reads of the damaged range fail with an error
// marked lsmstats.ErrCorruption that names the file; reads elsewhere go
// on; Verify names both files, goes on past them and lists what it could
// not check; Metrics counts Pebble's corruption events. With the
// properties block damaged the file cannot be opened at all: the physical
// statistics report it (PhysicalErr) rather than count it as empty.
func TestCorruptSST(t *testing.T) {
	for _, block := range []string{"data", "properties"} {
		t.Run(block, func(t *testing.T) {
			dir := smallStore(t, true)
			// The three commits' SSTs hold disjoint pks: damage one that
			// holds epoch 2's rows (pks 20000...) and no metadata.
			target := dataOnlySST(t, dir, 20000, 30000)
			corruptBlock(t, filepath.Join(dir, pebbleDir, fmt.Sprintf("%06d.sst", target)), block)

			for _, readOnly := range []bool{true, false} {
				log := &recordingLogger{}
				s, err := Open(dir, &Options{ReadOnly: readOnly, Logger: log})
				require.NoError(t, err)
				def, err := s.Table(1)
				require.NoError(t, err)
				name := fmt.Sprintf("%06d", target)

				// Reads: rows of the damaged file fail naming it; rows of the
				// other epochs (other files: the table has one vnode, so key
				// order is pk order) read.
				var failed, read int
				for _, e := range []uint64{1, 2, 3} {
					for i := uint64(0); i < 500; i += 50 {
						pk := keys.AppendUint64(nil, e*10000+i)
						row, ok, err := s.Get(1, def.VnodeOf(pk), pk)
						if err != nil {
							require.True(t, errors.Is(err, lsmstats.ErrCorruption), "%v", err)
							require.Contains(t, err.Error(), name)
							require.Equal(t, uint64(2), e, "only the damaged file's rows fail: %v", err)
							failed++
							continue
						}
						require.True(t, ok)
						require.Equal(t, fmt.Sprintf("row %d at %d", i, e), string(row))
						read++
					}
				}
				require.Positive(t, failed)
				require.GreaterOrEqual(t, read, 20)

				rep, err := s.Verify()
				require.NoError(t, err)
				require.False(t, rep.OK())
				require.Len(t, rep.Corrupt, 1, "%+v", rep)
				require.True(t, strings.HasPrefix(rep.Corrupt[0], "sst "+name+": "), rep.Corrupt[0])
				require.Contains(t, rep.Corrupt[0], "checksum mismatch")
				require.NotEmpty(t, rep.Unchecked)
				require.Empty(t, rep.Differences, "what could be checked matches")
				if block == "properties" {
					perr := s.Stats().PhysicalErr
					require.True(t, errors.Is(perr, lsmstats.ErrCorruption) || lsmstats.IsCorruption(perr), "%v", perr)
					require.Contains(t, perr.Error(), name)
					require.Contains(t, strings.Join(rep.Unchecked, "\n"), "physical statistics")
					rerr := s.RefreshStats()
					require.True(t, lsmstats.IsCorruption(rerr), "%v", rerr)
					require.Contains(t, rerr.Error(), name)
				} else {
					require.NoError(t, s.Stats().PhysicalErr)
					require.NoError(t, s.RefreshStats())
				}
				require.Positive(t, s.Metrics().Corruptions)
				require.Contains(t, log.text(), "corrupt data in")
				require.NoError(t, s.Close())
			}
		})
	}
}

// dataOnlySST returns a live SST of the store in dir whose keys are all
// table 1 rows with pk in [lo, hi).
func dataOnlySST(t *testing.T, dir string, lo, hi uint64) uint64 {
	t.Helper()
	s, err := roOpen(dir)
	require.NoError(t, err)
	defer s.Close()
	pkOf := func(key []byte) (uint64, bool) {
		k, err := keys.Decode(key)
		if err != nil || k.Table != 1 {
			return 0, false
		}
		pk, _, err := keys.DecodeUint64(k.PK)
		return pk, err == nil && pk >= lo && pk < hi
	}
	for _, fi := range ssttracker.Files(statsinternal.VersionOf(s.Stats().Physical)) {
		_, ok1 := pkOf(fi.Smallest)
		_, ok2 := pkOf(fi.Largest)
		if ok1 && ok2 {
			return fi.FileNum
		}
	}
	t.Fatalf("no SST holds only pks in [%d, %d)", lo, hi)
	return 0
}

// corruptBlock flips bytes in the middle of the first block of kind in the
// SST at path.
func corruptBlock(t *testing.T, path, kind string) {
	t.Helper()
	blocks, err := faultfs.SSTBlocks(path)
	require.NoError(t, err)
	for _, b := range blocks {
		if b.Kind == kind {
			_, err := faultfs.Damage(path, faultfs.Flip, b.Offset+b.Len/2, 4)
			require.NoError(t, err)
			return
		}
	}
	t.Fatalf("%s has no %s block: %v", path, kind, blocks)
}

// TestOpenDamagedFiles: each way pebble.Open fails on damaged files comes
// back as an error marked lsmstats.ErrCorruption naming what is wrong, for
// a read-only and a writable open alike, and a refused read-only open
// leaves the directory as it was. A store of another comparer is not
// corruption (TestOpenNoStore): a comparer name that differs in the OPTIONS
// file alone, the MANIFEST agreeing, is a damaged OPTIONS file.
func TestOpenDamagedFiles(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		want   string
	}{
		{"options-comparer", func(t *testing.T, dir string) {
			opts, err := filepath.Glob(filepath.Join(dir, pebbleDir, "OPTIONS-*"))
			require.NoError(t, err)
			require.NotEmpty(t, opts)
			for _, p := range opts {
				b, err := os.ReadFile(p)
				require.NoError(t, err)
				require.Contains(t, string(b), keys.ComparerName)
				// One byte of the name changes, as a flipped bit would.
				b = []byte(strings.Replace(string(b), keys.ComparerName, keys.ComparerName[:len(keys.ComparerName)-1]+"7", 1))
				require.NoError(t, os.WriteFile(p, b, 0o644))
			}
		}, "names another comparer than its MANIFEST: it is corrupt"},
		{"sst-missing", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, pebbleDir, fmt.Sprintf("%06d.sst", dataOnlySST(t, dir, 20000, 30000)))))
		}, "files the MANIFEST lists are missing"},
		{"sst-cut", func(t *testing.T, dir string) {
			p := filepath.Join(dir, pebbleDir, fmt.Sprintf("%06d.sst", dataOnlySST(t, dir, 20000, 30000)))
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.NoError(t, os.Truncate(p, st.Size()-10))
		}, "SSTs differ from their size in the MANIFEST"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := smallStore(t, true)
			c.damage(t, dir)
			before := dirState(t, dir)
			for _, readOnly := range []bool{true, false} {
				_, err := Open(dir, &Options{ReadOnly: readOnly, Logger: QuietLogger(io.Discard)})
				require.Error(t, err, "read-only %v", readOnly)
				require.True(t, errors.Is(err, lsmstats.ErrCorruption), "read-only %v: %v", readOnly, err)
				require.ErrorContains(t, err, c.want)
				require.ErrorContains(t, err, dir)
				require.NotContains(t, err.Error(), "written with another comparer")
				if readOnly {
					require.Equal(t, before, dirState(t, dir), "a refused read-only open changed the directory")
				}
			}
		})
	}
}
