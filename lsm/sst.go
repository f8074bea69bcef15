package lsm

import (
	"bufio"
	"bytes"
	"os"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/lsmstats/lsmstats/internal/livebuckets"
	"github.com/lsmstats/lsmstats/keys"
)

var errNotExist = os.ErrNotExist

// output writes a sorted stream of keys into one or more staged SSTs for a
// single ingestion, cutting files at the target size between prefixes (so
// the files never overlap and each prefix's versions stay in one file).
//
// Its files stay open until finish, which syncs them all at once: a
// checkpoint writes one SST per table, and syncing them one after the other
// cost a disk flush each on the commit path. (Pebble requires an ingested
// file to be synced before its handle is closed.) A spill's file, which only
// its own writer reads and which Open deletes, is not synced at all (noSync).
type output struct {
	fs     vfs.FS
	opts   sstable.WriterOptions
	target uint64
	path   func() string
	noSync bool
	// spans says where an SST must end (nil: at tables only).
	spans *sstSpans

	paths  []string
	files  []vfs.File // open files, synced and closed by finish
	w      *sstable.Writer
	prefix []byte // prefix of the last key written
	end    []byte // the end of the current file's span (sstSpans.end)
	n      int    // keys in the current file
}

// heldWritable is an objstorage.Writable whose Finish flushes its buffer
// and leaves the file open: the output syncs and closes it.
type heldWritable struct {
	bw *bufio.Writer
}

func (w *heldWritable) Write(p []byte) error {
	_, err := w.bw.Write(p)
	return err
}

func (w *heldWritable) Finish() error { return w.bw.Flush() }

func (w *heldWritable) Abort() {}

func (s *Store) newOutput() *output {
	return &output{fs: s.fs, opts: s.wopts, target: uint64(s.opts.TargetFileSize), spans: &s.spans,
		path: func() string { return s.stagingPath("ingest") }}
}

func (o *output) open() error {
	p := o.path()
	f, err := o.fs.Create(p, vfs.WriteCategoryUnspecified)
	if err != nil {
		return errors.Wrapf(err, "lsmstats: create %s", p)
	}
	o.paths = append(o.paths, p)
	o.files = append(o.files, f)
	o.w = sstable.NewWriter(&heldWritable{bw: bufio.NewWriterSize(f, 256<<10)}, o.opts)
	o.n = 0
	return nil
}

// cut closes the current file when key lies past its span (another
// table, the metadata table included, or another vnode partition:
// sstSpans), or at a new prefix once the file is big enough. Spans keep
// checkpoint SSTs of different tables and partitions from overlapping in
// L0, a compaction of one table's range rewrites no other table's data,
// and per-table value sizes apportion exactly.
func (o *output) cut(key []byte) error {
	if o.w != nil && o.n > 0 {
		p := key[:keys.Split(key)]
		if !within(key, o.end) || o.w.Raw().EstimatedSize() >= o.target && !bytes.Equal(p, o.prefix) {
			if err := o.closeFile(); err != nil {
				return err
			}
		}
	}
	if o.w == nil {
		if err := o.open(); err != nil {
			return err
		}
		o.end = o.spans.end(key)
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

func (o *output) addMeta(e livebuckets.MetaEntry) error {
	if e.Delete {
		return o.add(e.Key, pebble.InternalKeyKindDelete, nil)
	}
	return o.set(e.Key, e.Value)
}

// finishWithMeta writes the metadata entries meta (in key order, after
// what out holds) and finishes out's SSTs (finish); on an error, out is
// aborted.
func (o *output) finishWithMeta(meta []livebuckets.MetaEntry) ([]string, error) {
	for _, m := range meta {
		if err := o.addMeta(m); err != nil {
			o.abort()
			return nil, err
		}
	}
	return o.finish()
}

func (o *output) closeFile() error {
	w := o.w
	o.w = nil
	if err := w.Close(); err != nil {
		return errors.Wrapf(err, "lsmstats: finish %s", o.paths[len(o.paths)-1])
	}
	return nil
}

// finish finishes the last file, syncs every file (concurrently) and closes
// them, and returns the paths. On error every file is removed.
func (o *output) finish() ([]string, error) {
	if o.w != nil {
		if err := o.closeFile(); err != nil {
			o.abort()
			return nil, err
		}
	}
	errs := make([]error, len(o.files))
	if !o.noSync {
		if len(o.files) == 1 {
			errs[0] = o.files[0].Sync()
		} else {
			var wg sync.WaitGroup
			for i, f := range o.files {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = f.Sync()
				}()
			}
			wg.Wait()
		}
	}
	var err error
	for i, f := range o.files {
		if e := errors.CombineErrors(errs[i], f.Close()); e != nil && err == nil {
			err = errors.Wrapf(e, "lsmstats: sync %s", o.paths[i])
		}
	}
	o.files = nil
	if err != nil {
		o.abort()
		return nil, err
	}
	return o.paths, nil
}

// abort closes and removes every file written.
func (o *output) abort() {
	if o.w != nil {
		_ = o.w.Close()
		o.w = nil
	}
	for _, f := range o.files {
		_ = f.Close()
	}
	o.files = nil
	for _, p := range o.paths {
		_ = o.fs.Remove(p)
	}
	o.paths = nil
}
