package objstore

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cockroachdb/errors"
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
