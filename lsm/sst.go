package lsm

import (
	"bytes"
	"os"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/lsmstats/lsmstats/stats"
)

var errNotExist = os.ErrNotExist

// output writes a sorted stream of keys into one or more staged SSTs for a
// single ingestion, cutting files at the target size between prefixes (so
// the files never overlap and each prefix's versions stay in one file).
type output struct {
	fs     vfs.FS
	opts   sstable.WriterOptions
	target uint64
	path   func() string

	paths  []string
	w      *sstable.Writer
	prefix []byte // prefix of the last key written
	n      int    // keys in the current file
}

func (s *Store) newOutput() *output {
	return &output{fs: s.fs, opts: s.wopts, target: uint64(s.opts.TargetFileSize), path: func() string { return s.stagingPath("ingest") }}
}

func (o *output) open() error {
	p := o.path()
	f, err := o.fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: create %s", p)
	}
	o.paths = append(o.paths, p)
	o.w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), o.opts)
	o.n = 0
	return nil
}

// cut closes the current file when key starts another table (the
// metadata table included), or a new prefix once the file is big enough.
// One table per SST keeps each SST's bounds inside its table: checkpoint
// SSTs of different tables never overlap in L0, a compaction of one table's
// range rewrites no other table's data, and per-table value sizes apportion
// exactly.
func (o *output) cut(key []byte) error {
	if o.w != nil && o.n > 0 {
		t1, _ := keys.TableOf(key)
		t0, _ := keys.TableOf(o.prefix)
		p := key[:keys.Split(key)]
		if t1 != t0 || o.w.Raw().EstimatedSize() >= o.target && !bytes.Equal(p, o.prefix) {
			if err := o.closeFile(); err != nil {
				return err
			}
		}
	}
	if o.w == nil {
		return o.open()
	}
	return nil
}

func (o *output) note(key []byte) {
	o.prefix = append(o.prefix[:0], key[:keys.Split(key)]...)
	o.n++
}

// set adds a Pebble SET.
func (o *output) set(key, value []byte) error {
	if err := o.cut(key); err != nil {
		return err
	}
	if err := o.w.Set(key, value); err != nil {
		return errors.Wrapf(err, "lsmstats: write %s", o.paths[len(o.paths)-1])
	}
	o.note(key)
	return nil
}

// add adds an internal key of any point kind (SET, DEL, SINGLEDEL).
func (o *output) add(key []byte, kind pebble.InternalKeyKind, value []byte) error {
	if err := o.cut(key); err != nil {
		return err
	}
	if err := o.w.Raw().Add(pebble.MakeInternalKey(key, 0, kind), value, false); err != nil {
		return errors.Wrapf(err, "lsmstats: write %s", o.paths[len(o.paths)-1])
	}
	o.note(key)
	return nil
}

func (o *output) addMeta(e stats.MetaEntry) error {
	if e.Delete {
		return o.add(e.Key, pebble.InternalKeyKindDelete, nil)
	}
	return o.set(e.Key, e.Value)
}

func (o *output) closeFile() error {
	w := o.w
	o.w = nil
	if err := w.Close(); err != nil {
		return errors.Wrapf(err, "lsmstats: finish %s", o.paths[len(o.paths)-1])
	}
	return nil
}

// finish closes the last file (synced by the writer) and returns the paths.
func (o *output) finish() ([]string, error) {
	if o.w != nil {
		if err := o.closeFile(); err != nil {
			o.abort()
			return nil, err
		}
	}
	return o.paths, nil
}

// abort closes and removes every file written.
func (o *output) abort() {
	if o.w != nil {
		_ = o.w.Close()
		o.w = nil
	}
	for _, p := range o.paths {
		_ = o.fs.Remove(p)
	}
	o.paths = nil
}
