package objstore

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/minio/minio-go/v7"
)

// objectReader reads ranges of one object (remote.ObjectReader), one
// ranged GET per ReadAt. It knows the object's size from ReadObject's HEAD
// request and refuses reads past it without asking the server. It is safe
// for concurrent use and holds no connection: Close only forgets it.
type objectReader struct {
	b    *Bucket
	name string
	key  string
	size int64
}

// ReadAt is part of remote.ObjectReader: it fills p with the object's bytes
// from offset, all of them or an error.
func (r *objectReader) ReadAt(ctx context.Context, p []byte, offset int64) error {
	if offset < 0 || offset+int64(len(p)) > r.size || offset+int64(len(p)) < offset {
		return errors.Newf("objstore: get %q in bucket %q at %s: bytes [%d, %d) are not in the object's %d bytes",
			r.key, r.b.cfg.Bucket, r.b.cfg.Endpoint, offset, offset+int64(len(p)), r.size)
	}
	if len(p) == 0 {
		return nil
	}
	end := offset + int64(len(p)) // exclusive
	return r.b.do(ctx, KindGet, r.key, fmt.Sprintf("bytes [%d, %d)", offset, end), func(ctx context.Context) (int64, error) {
		opts := minio.GetObjectOptions{}
		if err := opts.SetRange(offset, end-1); err != nil {
			return 0, err
		}
		body, _, header, err := r.b.core.GetObject(ctx, r.b.cfg.Bucket, r.key, opts)
		if err != nil {
			return 0, err
		}
		defer body.Close()
		if err := checkContentRange(header.Get("Content-Range"), offset, end, r.size); err != nil {
			return 0, err
		}
		n, err := io.ReadFull(body, p)
		if err != nil {
			return 0, errors.Wrapf(err, "read %d of %d bytes", n, len(p))
		}
		// Read to the end of the answer, which the transport needs to
		// reuse the connection for the next request.
		var extra [1]byte
		if m, err := body.Read(extra[:]); m != 0 || (err != nil && err != io.EOF) {
			if err == nil {
				err = errors.Newf("answer longer than the %d bytes asked", len(p))
			}
			return 0, err
		}
		return int64(n), nil
	})
}

// checkContentRange checks that a ranged GET's answer holds bytes
// [start, end) of an object of size bytes: its Content-Range header says
// so, or, without one, the range is the whole object (a server may answer
// such a range with the plain object). A server that ignored the range
// would otherwise pass bytes from the object's start off as the range's.
func checkContentRange(h string, start, end, size int64) error {
	if h == "" {
		if start == 0 && end == size {
			return nil
		}
		return errors.Newf("answer to a ranged GET of bytes [%d, %d) has no Content-Range", start, end)
	}
	want := fmt.Sprintf("bytes %d-%d/", start, end-1)
	if !strings.HasPrefix(h, want) {
		return errors.Newf("answer to a ranged GET of bytes [%d, %d) has Content-Range %q", start, end, h)
	}
	if total := strings.TrimPrefix(h, want); total != "*" {
		if n, err := strconv.ParseInt(total, 10, 64); err != nil || n != size {
			// The object changed size since ReadObject: not the bytes asked.
			return errors.Newf("answer to a ranged GET of bytes [%d, %d) has Content-Range %q, for an object of %d bytes", start, end, h, size)
		}
	}
	return nil
}

// Close is part of remote.ObjectReader.
func (r *objectReader) Close() error { return nil }

// ReadTail reads the last n bytes of object objName (all of it, if it is
// shorter) in one GET of a suffix range, whose answer also says the
// object's size: no HEAD. It returns them with that size, and a reader of
// the object's bytes as ReadObject's (each ReadAt one ranged GET). n must
// be positive. A missing object's error satisfies IsNotExistError; an
// empty object has no last bytes to read (S3 answers 416, InvalidRange).
func (b *Bucket) ReadTail(ctx context.Context, objName string, n int64) (remote.ObjectReader, []byte, int64, error) {
	if err := b.checkName(KindGet, objName); err != nil {
		return nil, nil, 0, err
	}
	if n <= 0 {
		return nil, nil, 0, errors.Newf("objstore: get the last %d bytes of %q in bucket %q: not a positive length", n, b.key(objName), b.cfg.Bucket)
	}
	key := b.key(objName)
	var tail []byte
	var size int64
	err := b.do(ctx, KindGet, key, fmt.Sprintf("last %d bytes", n), func(ctx context.Context) (int64, error) {
		opts := minio.GetObjectOptions{}
		if err := opts.SetRange(0, -n); err != nil {
			return 0, err
		}
		body, info, header, err := b.core.GetObject(ctx, b.cfg.Bucket, key, opts)
		if err != nil {
			return 0, err
		}
		defer body.Close()
		start, total, err := suffixRange(header.Get("Content-Range"), info.Size, n)
		if err != nil {
			return 0, err
		}
		buf := make([]byte, total-start)
		if m, err := io.ReadFull(body, buf); err != nil {
			return 0, errors.Wrapf(err, "read %d of %d bytes", m, len(buf))
		}
		var extra [1]byte
		if m, err := body.Read(extra[:]); m != 0 || (err != nil && err != io.EOF) {
			if err == nil {
				err = errors.Newf("answer longer than the %d bytes of its Content-Range", len(buf))
			}
			return 0, err
		}
		tail, size = buf, total
		return int64(len(buf)), nil
	})
	if err != nil {
		return nil, nil, 0, err
	}
	return &objectReader{b: b, name: objName, key: key, size: size}, tail, size, nil
}

// suffixRange checks the answer to a GET of the last n bytes of an object,
// whose body is length bytes, and returns the offset of its first byte and
// the object's size. With a Content-Range header h it must hold the last
// min(n, size) bytes; without one, the body is the whole object (a server
// may answer a range covering it with the plain object), which must then be
// at most n bytes.
func suffixRange(h string, length, n int64) (start, size int64, err error) {
	if h == "" {
		if length < 0 || length > n {
			return 0, 0, errors.Newf("answer to a GET of the last %d bytes has no Content-Range and %d bytes", n, length)
		}
		return 0, length, nil
	}
	bad := errors.Newf("answer to a GET of the last %d bytes has Content-Range %q", n, h)
	rng, total, ok := strings.Cut(strings.TrimPrefix(h, "bytes "), "/")
	first, last, ok2 := strings.Cut(rng, "-")
	if !ok || !ok2 || !strings.HasPrefix(h, "bytes ") {
		return 0, 0, bad
	}
	var end int64
	var err1, err2, err3 error
	start, err1 = strconv.ParseInt(first, 10, 64)
	end, err2 = strconv.ParseInt(last, 10, 64)
	size, err3 = strconv.ParseInt(total, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, bad
	}
	if end != size-1 || start != size-min(n, size) || (length >= 0 && length != end+1-start) {
		return 0, 0, errors.Newf("answer to a GET of the last %d bytes has Content-Range %q and %d bytes", n, h, length)
	}
	return start, size, nil
}
