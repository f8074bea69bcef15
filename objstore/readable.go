package objstore

import (
	"context"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/objstorage"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
)

// NewReadable opens object name of storage s for reading as Pebble's
// objstorage.Readable, for reading an SST with package sstable outside
// Pebble (its properties, or every block of it): one HEAD (ReadObject),
// then each read is served from a window of the object that the last
// ranged GET fetched, window bytes (or the read's length, if longer)
// from the read's offset, or ending at the object's end when the read is
// near it. So reading an SST's properties (its footer, metaindex and
// properties block, all at its end) costs one GET with a window of a few
// hundred KiB, and reading every block in order one GET per window.
// Reading a file Pebble's own readers hold gains nothing from this: Pebble
// reads its remote SSTs through its own provider. window <= 0 means 1 MiB.
//
// An error of ReadObject is returned as it is (s.IsNotExistError tells a
// missing object). The Readable is safe for concurrent use; it holds at
// most one window.
func NewReadable(ctx context.Context, s remote.Storage, name string, window int64) (objstorage.Readable, error) {
	r, size, err := s.ReadObject(ctx, name)
	if err != nil {
		return nil, err
	}
	if window <= 0 {
		window = 1 << 20
	}
	return &windowReadable{r: r, name: name, size: size, window: window}, nil
}

// tailReader is a Storage that reads an object's last bytes in one request
// (Bucket.ReadTail).
type tailReader interface {
	ReadTail(ctx context.Context, name string, n int64) (remote.ObjectReader, []byte, int64, error)
}

// NewTailReadable is NewReadable for a reader that starts at the object's
// end, as an SST reader does: its footer, then its metaindex, then its
// properties block, each before the last. It reads the object's last tail
// bytes (all of a shorter object) at once: on a Storage that can
// (Bucket.ReadTail), in one GET of that suffix, whose answer also says the
// object's size (no HEAD); from memory if a TailKeeper kept them; on
// another Storage, ReadObject then a ranged read. A
// read that ends within the bytes held but starts below them, by at most
// window bytes, extends them down to its start with one ranged read of the
// bytes missing: an SST's properties longer than the tail cost one more
// GET of just them. Other reads go as NewReadable's, window bytes at a
// time. tail <= 0 means 64 KiB, window <= 0 1 MiB.
//
// Errors are as NewReadable's. The Readable is safe for concurrent use; it
// holds at most the tail and one window.
func NewTailReadable(ctx context.Context, s remote.Storage, name string, tail, window int64) (objstorage.Readable, error) {
	if tail <= 0 {
		tail = 64 << 10
	}
	if window <= 0 {
		window = 1 << 20
	}
	r, buf, size, err := readTail(ctx, s, name, tail)
	if err != nil {
		return nil, err
	}
	return &windowReadable{r: r, name: name, size: size, window: window, buf: buf, off: size - int64(len(buf)), extend: true}, nil
}

// windowReadable is NewReadable's Readable.
type windowReadable struct {
	r      remote.ObjectReader
	name   string
	size   int64
	window int64

	// extend says that a read just below buf extends it (NewTailReadable).
	extend bool

	mu     sync.Mutex
	buf    []byte // bytes [off, off+len(buf)) of the object
	off    int64
	closed bool
}

// ReadAt is part of objstorage.Readable.
func (w *windowReadable) ReadAt(ctx context.Context, p []byte, off int64) error {
	end := off + int64(len(p))
	if off < 0 || end > w.size || end < off {
		return errors.Newf("objstore: read of object %q: bytes [%d, %d) are not in its %d bytes", w.name, off, end, w.size)
	}
	if len(p) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return errors.Newf("objstore: read of object %q after Close", w.name)
	}
	if off >= w.off && end <= w.off+int64(len(w.buf)) {
		copy(p, w.buf[off-w.off:])
		return nil
	}
	if w.extend && off < w.off && end > w.off && end <= w.off+int64(len(w.buf)) && w.off-off <= w.window {
		// Below the bytes held, up into them: read the bytes missing.
		grown := make([]byte, w.off-off+int64(len(w.buf)))
		if err := w.r.ReadAt(ctx, grown[:w.off-off], off); err != nil {
			return err
		}
		copy(grown[w.off-off:], w.buf)
		w.buf, w.off = grown, off
		copy(p, w.buf)
		return nil
	}
	if int64(len(p)) >= w.window {
		return w.r.ReadAt(ctx, p, off)
	}
	start, stop := off, min(w.size, off+w.window)
	if stop-start < w.window {
		start = max(0, stop-w.window)
	}
	n := int(stop - start)
	if cap(w.buf) < n {
		w.buf = make([]byte, n)
	}
	w.buf = w.buf[:n]
	if err := w.r.ReadAt(ctx, w.buf, start); err != nil {
		w.buf = w.buf[:0]
		return err
	}
	w.off = start
	copy(p, w.buf[off-start:])
	return nil
}

// Close is part of objstorage.Readable.
func (w *windowReadable) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.buf = nil
	return w.r.Close()
}

// Size is part of objstorage.Readable.
func (w *windowReadable) Size() int64 { return w.size }

// NewReadHandle is part of objstorage.Readable: reads through the handle
// are the Readable's own (its window is the read-ahead).
func (w *windowReadable) NewReadHandle(objstorage.ReadBeforeSize) objstorage.ReadHandle {
	h := objstorage.MakeNoopReadHandle(w)
	return &h
}
