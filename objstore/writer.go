package objstore

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/cockroachdb/errors"
	"github.com/minio/minio-go/v7"
)

// CreateObject is part of remote.Storage: a writer whose bytes become the
// object at Close, replacing any object of that name. An object that ends
// within Config.PartSize bytes goes up in one PUT at Close; a longer one in
// a multipart upload, each full part sent while the writer fills the next
// (Config.UploadConcurrency parts at once), the last part and the
// completion at Close. Each request carries its body's MD5, which the
// server checks. Until Close returns nil no object of that name is
// written, and an upload that failed is aborted, so a failed writer leaves
// neither an object nor parts behind (an object of the name from before
// stays as it was).
//
// The writer is not safe for concurrent use. Close must be called, once;
// after an error, Write returns that error and Close returns it too.
// Pebble's Writable.Abort closes the writer too, which uploads what was
// written: the object stays in the bucket, unreferenced.
func (b *Bucket) CreateObject(objName string) (io.WriteCloser, error) {
	if err := b.checkName(KindPut, objName); err != nil {
		return nil, err
	}
	if b.closed.Load() {
		return nil, errors.Wrapf(ErrClosed, "objstore: create %q in bucket %q", b.key(objName), b.cfg.Bucket)
	}
	return &objectWriter{b: b, key: b.key(objName), sem: make(chan struct{}, b.cfg.UploadConcurrency)}, nil
}

// objectWriter is CreateObject's writer.
type objectWriter struct {
	b   *Bucket
	key string

	buf      *[]byte // the part being filled; nil before the first byte
	written  int64   // bytes written so far
	uploadID string  // the multipart upload, once started
	nextPart int     // the number of the next part to send (from 1)

	sem chan struct{} // one slot per part in flight
	wg  sync.WaitGroup

	mu    sync.Mutex
	parts []minio.CompletePart // the parts sent
	err   error                // the first error: the writer's result

	closed   bool
	closeErr error
}

func (w *objectWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

func (w *objectWriter) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// Write is part of io.Writer: it copies p into the part being filled and
// sends the part when it is full and more bytes come. An error is the upload's first error.
func (w *objectWriter) Write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.Newf("objstore: write to %q in bucket %q after Close", w.key, w.b.cfg.Bucket)
	}
	if err := w.failed(); err != nil {
		return 0, err
	}
	partSize := int(w.b.cfg.PartSize)
	n := 0
	for len(p) > 0 {
		// A full part goes only when more bytes come: an object of
		// exactly PartSize bytes is one PUT.
		if w.buf != nil && len(*w.buf) == partSize {
			if err := w.sendPart(); err != nil {
				return n, err
			}
		}
		if w.buf == nil {
			w.buf = w.b.partBuffer()
		}
		c := min(len(p), partSize-len(*w.buf))
		*w.buf = append(*w.buf, p[:c]...)
		p, n, w.written = p[c:], n+c, w.written+int64(c)
	}
	return n, nil
}

// partBuffer returns an empty buffer of capacity PartSize.
func (b *Bucket) partBuffer() *[]byte {
	if p, ok := b.parts.Get().(*[]byte); ok {
		*p = (*p)[:0]
		return p
	}
	buf := make([]byte, 0, b.cfg.PartSize)
	return &buf
}

// sendPart starts the multipart upload if it is not started and sends the
// part being filled in the background, waiting for a slot first.
func (w *objectWriter) sendPart() error {
	if w.uploadID == "" {
		err := w.b.do(context.Background(), KindCreateMultipart, w.key, "", func(ctx context.Context) (int64, error) {
			id, err := w.b.core.NewMultipartUpload(ctx, w.b.cfg.Bucket, w.key, minio.PutObjectOptions{})
			w.uploadID = id
			return 0, err
		})
		if err != nil {
			w.fail(err)
			return err
		}
	}
	w.nextPart++
	num, buf := w.nextPart, w.buf
	w.buf = nil
	w.sem <- struct{}{}
	if err := w.failed(); err != nil { // a part failed while this one waited
		<-w.sem
		w.b.parts.Put(buf)
		return err
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		defer w.b.parts.Put(buf)
		data := *buf
		sum := md5Base64(data)
		var etag string
		err := w.b.do(context.Background(), KindUploadPart, w.key, fmt.Sprintf("part %d (%d bytes)", num, len(data)), func(ctx context.Context) (int64, error) {
			part, err := w.b.core.PutObjectPart(ctx, w.b.cfg.Bucket, w.key, w.uploadID, num,
				bytes.NewReader(data), int64(len(data)), minio.PutObjectPartOptions{Md5Base64: sum, DisableContentSha256: true})
			etag = part.ETag
			return int64(len(data)), err
		})
		if err != nil {
			w.fail(err)
			return
		}
		w.mu.Lock()
		w.parts = append(w.parts, minio.CompletePart{PartNumber: num, ETag: etag})
		w.mu.Unlock()
	}()
	return nil
}

// Close is part of io.Closer: it sends what is left and makes the object,
// or aborts the upload and returns the writer's first error.
func (w *objectWriter) Close() error {
	if w.closed {
		return w.closeErr
	}
	w.closed = true
	w.closeErr = w.finish()
	return w.closeErr
}

func (w *objectWriter) finish() error {
	if w.uploadID == "" && w.failed() == nil {
		return w.putWhole()
	}
	if w.failed() == nil && w.buf != nil && len(*w.buf) > 0 {
		_ = w.sendPart() // its error is the writer's
	}
	if w.buf != nil {
		w.b.parts.Put(w.buf)
		w.buf = nil
	}
	w.wg.Wait()
	if err := w.failed(); err != nil {
		w.abort()
		return err
	}
	slices.SortFunc(w.parts, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	attempts := 0
	err := w.b.do(context.Background(), KindCompleteMultipart, w.key, fmt.Sprintf("(%d parts, %d bytes)", len(w.parts), w.written), func(ctx context.Context) (int64, error) {
		attempts++
		_, err := w.b.core.CompleteMultipartUpload(ctx, w.b.cfg.Bucket, w.key, w.uploadID, w.parts, minio.PutObjectOptions{})
		if err != nil && attempts > 1 && minio.ToErrorResponse(err).Code == "NoSuchUpload" {
			// An earlier attempt completed the upload but its answer was
			// lost: the object is there if it has every byte.
			if info, serr := w.b.core.StatObject(ctx, w.b.cfg.Bucket, w.key, minio.StatObjectOptions{}); serr == nil && info.Size == w.written {
				return 0, nil
			}
		}
		return 0, err
	})
	if err != nil {
		w.abort()
		return err
	}
	return nil
}

// putWhole sends an object that fits in one part with one PUT.
func (w *objectWriter) putWhole() error {
	var data []byte
	if w.buf != nil {
		data = *w.buf
		defer func() { w.b.parts.Put(w.buf); w.buf = nil }()
	}
	sum := md5Base64(data)
	return w.b.do(context.Background(), KindPut, w.key, fmt.Sprintf("(%d bytes)", len(data)), func(ctx context.Context) (int64, error) {
		_, err := w.b.core.PutObject(ctx, w.b.cfg.Bucket, w.key, bytes.NewReader(data), int64(len(data)), sum, "",
			minio.PutObjectOptions{DisableContentSha256: true})
		return int64(len(data)), err
	})
}

// abort abandons the multipart upload, so that the server drops its parts;
// its failure is counted but not returned (the writer's error says more).
func (w *objectWriter) abort() {
	if w.uploadID == "" {
		return
	}
	_ = w.b.do(context.Background(), KindAbortMultipart, w.key, "", func(ctx context.Context) (int64, error) {
		err := w.b.core.AbortMultipartUpload(ctx, w.b.cfg.Bucket, w.key, w.uploadID)
		if minio.ToErrorResponse(err).Code == "NoSuchUpload" {
			return 0, nil
		}
		return 0, err
	})
}

func md5Base64(data []byte) string {
	sum := md5.Sum(data)
	return base64.StdEncoding.EncodeToString(sum[:])
}
