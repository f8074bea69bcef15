package objstore

import (
	"context"
	"io"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
)

// TailKeeper is a remote.Storage that keeps the last bytes of the objects
// written through it, so that a reader of an object's end (an SST's
// footer, metaindex and properties, NewTailReadable) that comes soon after
// the write takes them from memory instead of asking the server for bytes
// it was just sent. A store that reads the properties of every SST it
// writes (the statistics do, after every flush and compaction) saves a
// round trip per SST. Make one with NewTailKeeper.
//
// An object's tail is kept once its writer's Close returned nil (the
// object is then in the storage, with exactly the bytes written), and
// given out once: ReadTail takes it, and a later ReadTail asks the
// storage. The tails kept are bounded in bytes; past the bound the oldest
// go. Deleting an object drops its tail. An object changed in the storage
// behind the keeper's back is not noticed by the reader that takes its
// tail (the bytes are the ones written); reads beyond the tail go to the
// storage, which must still hold an object of the size written.
//
// Safe for concurrent use (each writer by one goroutine, as any
// remote.Storage's).
type TailKeeper struct {
	remote.Storage
	tail, limit int64
	keep        func(name string) bool

	mu    sync.Mutex
	kept  map[string]keptTail
	order []string // names in the order kept; some may be gone
	bytes int64
}

// keptTail is the end of one object written.
type keptTail struct {
	tail []byte // its last bytes (all of a short object)
	size int64  // the object's size
}

// NewTailKeeper returns a TailKeeper over s that keeps the last tail bytes
// of each object whose name keep accepts (nil: every object), at most
// limit bytes of tails in all.
func NewTailKeeper(s remote.Storage, tail, limit int64, keep func(name string) bool) *TailKeeper {
	return &TailKeeper{Storage: s, tail: tail, limit: limit, keep: keep, kept: map[string]keptTail{}}
}

// CreateObject implements remote.Storage: the storage's writer, whose last
// bytes the keeper keeps once it closes without error.
func (k *TailKeeper) CreateObject(name string) (io.WriteCloser, error) {
	w, err := k.Storage.CreateObject(name)
	if err != nil || k.tail <= 0 || (k.keep != nil && !k.keep(name)) {
		return w, err
	}
	k.drop(name) // an object written again
	return &tailWriter{WriteCloser: w, k: k, name: name}, nil
}

// Delete implements remote.Storage.
func (k *TailKeeper) Delete(name string) error {
	k.drop(name)
	return k.Storage.Delete(name)
}

// ReadTail reads the last n bytes of object name, as Bucket.ReadTail: from
// the tail kept of it (taken: the next ReadTail asks the storage) when it
// holds them, then without a request (the returned reader asks the storage
// for the object when it is first read); else from the storage, in one
// request if the storage can (Bucket.ReadTail), else two (ReadObject, then
// a ranged read).
func (k *TailKeeper) ReadTail(ctx context.Context, name string, n int64) (remote.ObjectReader, []byte, int64, error) {
	k.mu.Lock()
	t, ok := k.kept[name]
	if ok && int64(len(t.tail)) >= min(n, t.size) {
		delete(k.kept, name)
		k.bytes -= int64(len(t.tail))
		k.mu.Unlock()
		tail := t.tail[int64(len(t.tail))-min(n, t.size):]
		return &lazyReader{s: k.Storage, name: name, size: t.size}, tail, t.size, nil
	}
	k.mu.Unlock()
	return readTail(ctx, k.Storage, name, n)
}

// readTail reads the last n bytes of object name of s: Bucket.ReadTail,
// or ReadObject and a ranged read.
func readTail(ctx context.Context, s remote.Storage, name string, n int64) (remote.ObjectReader, []byte, int64, error) {
	if tr, ok := s.(tailReader); ok {
		return tr.ReadTail(ctx, name, n)
	}
	r, size, err := s.ReadObject(ctx, name)
	if err != nil {
		return nil, nil, 0, err
	}
	buf := make([]byte, min(n, size))
	if err := r.ReadAt(ctx, buf, size-int64(len(buf))); err != nil {
		_ = r.Close()
		return nil, nil, 0, err
	}
	return r, buf, size, nil
}

// Kept returns the number of tails kept and their bytes.
func (k *TailKeeper) Kept() (tails int, bytes int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.kept), k.bytes
}

// add keeps the tail of object name, of size bytes, and lets the oldest
// tails go past the limit.
func (k *TailKeeper) add(name string, tail []byte, size int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.kept[name]; ok {
		k.bytes -= int64(len(old.tail))
	}
	k.kept[name] = keptTail{tail: tail, size: size}
	k.order = append(k.order, name)
	k.bytes += int64(len(tail))
	for k.bytes > k.limit && len(k.order) > 0 {
		oldest := k.order[0]
		k.order = k.order[1:]
		if t, ok := k.kept[oldest]; ok {
			delete(k.kept, oldest)
			k.bytes -= int64(len(t.tail))
		}
	}
	if len(k.order) > 2*len(k.kept)+16 {
		// Names taken or dropped pile up in order: keep those still kept.
		live := k.order[:0]
		for _, n := range k.order {
			if _, ok := k.kept[n]; ok {
				live = append(live, n)
			}
		}
		clear(k.order[len(live):])
		k.order = live
	}
}

// drop forgets the tail of object name.
func (k *TailKeeper) drop(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if t, ok := k.kept[name]; ok {
		delete(k.kept, name)
		k.bytes -= int64(len(t.tail))
	}
}

// tailWriter is a writer of the storage that holds the last bytes
// written.
type tailWriter struct {
	io.WriteCloser
	k       *TailKeeper
	name    string
	buf     []byte // the last bytes written: at most 2*tail
	written int64
	closed  bool
}

func (w *tailWriter) Write(p []byte) (int, error) {
	n, err := w.WriteCloser.Write(p)
	w.written += int64(n)
	tail := int(w.k.tail)
	if q := p[:n]; len(q) >= tail {
		w.buf = append(w.buf[:0], q[len(q)-tail:]...)
	} else {
		if len(w.buf)+len(q) > 2*tail {
			keep := tail - len(q)
			w.buf = w.buf[:copy(w.buf, w.buf[len(w.buf)-keep:])]
		}
		w.buf = append(w.buf, q...)
	}
	return n, err
}

func (w *tailWriter) Close() error {
	err := w.WriteCloser.Close()
	if err == nil && !w.closed {
		tail := w.buf[max(0, len(w.buf)-int(w.k.tail)):]
		w.k.add(w.name, append([]byte(nil), tail...), w.written)
	}
	w.closed, w.buf = true, nil
	return err
}

// lazyReader reads an object whose size is known, opening it in the
// storage (ReadObject) at its first read.
type lazyReader struct {
	s    remote.Storage
	name string
	size int64

	once sync.Once
	r    remote.ObjectReader
	err  error
}

func (l *lazyReader) ReadAt(ctx context.Context, p []byte, off int64) error {
	l.once.Do(func() {
		var size int64
		l.r, size, l.err = l.s.ReadObject(ctx, l.name)
		if l.err == nil && size != l.size {
			_ = l.r.Close()
			l.r = nil
			l.err = errors.Newf("objstore: object %q holds %d bytes, not the %d written", l.name, size, l.size)
		}
	})
	if l.err != nil {
		return l.err
	}
	return l.r.ReadAt(ctx, p, off)
}

func (l *lazyReader) Close() error {
	l.once.Do(func() { l.err = errors.Newf("objstore: read of object %q after Close", l.name) })
	if l.r != nil {
		return l.r.Close()
	}
	return nil
}
