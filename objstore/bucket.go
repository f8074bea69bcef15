package objstore

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Bucket is a prefix of one S3 bucket as Pebble's remote.Storage: object
// name N is the S3 object Config.Prefix+N. It is also a
// prometheus.Collector of its requests (Collect). It is safe for concurrent
// use; make one with New or Open.
type Bucket struct {
	cfg       Config
	core      minio.Core
	transport *http.Transport // ours to close, nil when the caller's
	m         *metrics
	closed    atomic.Bool

	// parts holds part buffers (*[]byte of capacity cfg.PartSize) between
	// writers.
	parts sync.Pool
}

var _ remote.Storage = (*Bucket)(nil)

// New returns a Bucket for cfg, or an error naming the field of cfg that is
// wrong. It sends no request: Check asks the server whether the endpoint,
// the credentials and the bucket are right.
func New(cfg Config) (*Bucket, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	u, _ := parseEndpoint(cfg.Endpoint) // checked by withDefaults
	creds := credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	if cfg.AccessKeyID == "" {
		creds = credentials.New(&credentials.Static{Value: credentials.Value{SignerType: credentials.SignatureAnonymous}})
	}
	b := &Bucket{cfg: cfg, m: newMetrics()}
	tr := cfg.Transport
	if tr == nil {
		b.transport = newTransport()
		tr = b.transport
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:     creds,
		Secure:    u.Scheme == "https",
		Transport: tr,
		Region:    cfg.Region,
		// The Bucket retries, with its own bounds and counters; the
		// client's retries would multiply them.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, errors.Wrapf(err, "objstore: S3 client for %s", cfg.Endpoint)
	}
	b.core = minio.Core{Client: client}
	return b, nil
}

// Open returns a Bucket for an object-store URL (ParseURL).
func Open(rawURL string) (*Bucket, error) {
	cfg, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return New(cfg)
}

// newTransport returns the HTTP transport of a Bucket that was given none:
// connections kept alive for reuse (Pebble reads from many goroutines),
// no compression (it would break ranged reads' lengths), and a bound on
// connecting; the attempts' deadlines bound the rest.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// Config returns the Bucket's configuration, with the defaults filled in.
func (b *Bucket) Config() Config { return b.cfg }

// Stats returns the Bucket's counters per kind of request. It is safe to
// call concurrently with anything.
func (b *Bucket) Stats() Stats { return b.m.stats() }

// Close closes the Bucket: later calls fail with ErrClosed (readers and
// writers made before included), and its idle connections are closed. It
// waits for nothing; close the writers first. Closing twice is a no-op.
func (b *Bucket) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	if b.transport != nil {
		b.transport.CloseIdleConnections()
	}
	return nil
}

// key returns the S3 object key of object name.
func (b *Bucket) key(name string) string { return b.cfg.Prefix + name }

// checkName refuses an object name S3 cannot store.
func (b *Bucket) checkName(k Kind, name string) error {
	if name == "" {
		return errors.Newf("objstore: %s in bucket %q at %s: empty object name", k, b.cfg.Bucket, b.cfg.Endpoint)
	}
	if len(b.key(name)) > 1024 {
		return errors.Newf("objstore: %s %q in bucket %q: object key of %d bytes is longer than S3's 1024", k, b.key(name), b.cfg.Bucket, len(b.key(name)))
	}
	return nil
}

// do runs one request of kind k about object key with the Bucket's retry
// policy (see retry).
func (b *Bucket) do(ctx context.Context, k Kind, key, detail string, attempt func(ctx context.Context) (int64, error)) error {
	return b.retry(ctx, b.cfg.Retry, k, key, detail, attempt)
}

// retry runs attempt until it succeeds, fails for a reason that does not
// pass (see class.retriable), or pol's bounds are reached: MaxAttempts,
// MaxElapsed (no attempt runs past it), the caller's ctx. Each attempt
// runs under a deadline (AttemptTimeout, or MaxElapsed's if nearer) and
// returns how many bytes of object data it moved. Every attempt is counted
// and timed; a failure is counted by class and returned as failure builds
// it.
func (b *Bucket) retry(ctx context.Context, pol RetryPolicy, k Kind, key, detail string, attempt func(ctx context.Context) (int64, error)) error {
	if b.closed.Load() {
		return errors.Wrapf(ErrClosed, "objstore: %s %q in bucket %q", k, key, b.cfg.Bucket)
	}
	start := time.Now()
	deadline := start.Add(pol.MaxElapsed)
	backoff := pol.InitialBackoff
	var prevErr error
	var prevClass class
	for n := 1; ; n++ {
		attemptDeadline := time.Now().Add(pol.AttemptTimeout)
		truncated := attemptDeadline.After(deadline)
		if truncated {
			attemptDeadline = deadline
		}
		actx, cancel := context.WithDeadline(ctx, attemptDeadline)
		t0 := time.Now()
		moved, err := attempt(actx)
		cancel()
		b.m.attempt(k, n > 1, time.Since(t0), moved, err == nil)
		if err == nil {
			return nil
		}
		cl := classify(ctx, err)
		switch {
		case cl == classCanceled:
			err = errors.CombineErrors(ctx.Err(), err)
		case cl == classUnreachable && truncated && prevErr != nil && errors.Is(err, context.DeadlineExceeded):
			// The attempt only ran out of the request's time (MaxElapsed):
			// the attempt before says more about what is wrong.
			err, cl = prevErr, prevClass
		}
		prevErr, prevClass = err, cl
		if !cl.retriable() || n >= pol.MaxAttempts || b.closed.Load() {
			b.m.failed(k, cl)
			return b.failure(k, key, detail, err, cl, n, time.Since(start))
		}
		// Full jitter's upper half: between half the backoff and all of it.
		sleep := backoff/2 + rand.N(backoff/2+1)
		if time.Now().Add(sleep).After(deadline) {
			b.m.failed(k, cl)
			return b.failure(k, key, detail, err, cl, n, time.Since(start))
		}
		if b.cfg.OnRetry != nil {
			// The error of this attempt, not of the request: a retry
			// follows, so nothing "gave up" (the attempts come apart).
			b.cfg.OnRetry(b.failure(k, key, detail, err, cl, 1, 0), n, sleep)
		}
		t := time.NewTimer(sleep)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			b.m.failed(k, classCanceled)
			return b.failure(k, key, detail, errors.CombineErrors(ctx.Err(), err), classCanceled, n, time.Since(start))
		}
		backoff = min(2*backoff, pol.MaxBackoff)
	}
}

// ReadObject is part of remote.Storage: it asks the object's size (a HEAD
// request) and returns a reader of ranged GETs.
func (b *Bucket) ReadObject(ctx context.Context, objName string) (remote.ObjectReader, int64, error) {
	size, err := b.size(ctx, objName)
	if err != nil {
		return nil, 0, err
	}
	return &objectReader{b: b, name: objName, key: b.key(objName), size: size}, size, nil
}

// Size is part of remote.Storage: the object's length (a HEAD request).
func (b *Bucket) Size(objName string) (int64, error) {
	return b.size(context.Background(), objName)
}

func (b *Bucket) size(ctx context.Context, objName string) (int64, error) {
	if err := b.checkName(KindHead, objName); err != nil {
		return 0, err
	}
	key := b.key(objName)
	var size int64
	err := b.do(ctx, KindHead, key, "", func(ctx context.Context) (int64, error) {
		info, err := b.core.StatObject(ctx, b.cfg.Bucket, key, minio.StatObjectOptions{})
		size = info.Size
		return 0, err
	})
	return size, err
}

// Delete is part of remote.Storage. S3 answers a delete of an object that
// does not exist as one that does: no error.
func (b *Bucket) Delete(objName string) error {
	if err := b.checkName(KindDelete, objName); err != nil {
		return err
	}
	key := b.key(objName)
	return b.do(context.Background(), KindDelete, key, "", func(ctx context.Context) (int64, error) {
		return 0, b.core.RemoveObject(ctx, b.cfg.Bucket, key, minio.RemoveObjectOptions{})
	})
}

// List is part of remote.Storage: the names of the objects whose names
// start with prefix, less prefix, sorted. With delimiter "/", names with a
// "/" after prefix are grouped as S3 does, into their part up to that "/",
// reported less prefix and without the "/": with objects a, b/4, b/5 and
// b/6, List("", "/") is [a b] and List("b/", "/") is [4 5 6]. Other
// delimiters are refused. Each page of up to 1,000 names is one request,
// retried on its own.
func (b *Bucket) List(prefix, delimiter string) ([]string, error) {
	full := b.key(prefix)
	if delimiter != "" && delimiter != "/" {
		return nil, errors.Newf("objstore: list %q in bucket %q: delimiter %q (only \"\" and \"/\" are supported)", full, b.cfg.Bucket, delimiter)
	}
	const pageSize = 1000
	noOwner := false
	seen := map[string]bool{}
	var names []string
	startAfter := ""
	for {
		var page []string
		var last string
		err := b.do(context.Background(), KindList, full, "", func(ctx context.Context) (int64, error) {
			page, last = page[:0], ""
			// The iterator sends one request per page of pageSize names;
			// taking at most pageSize names makes it one request, which
			// this attempt's deadline bounds.
			for o := range b.core.ListObjectsIter(ctx, b.cfg.Bucket, minio.ListObjectsOptions{
				Prefix: full, Recursive: delimiter == "", MaxKeys: pageSize, StartAfter: startAfter, FetchOwner: &noOwner,
			}) {
				if o.Err != nil {
					return 0, o.Err
				}
				page = append(page, o.Key)
				next := o.Key
				if strings.HasSuffix(o.Key, delimiter) && delimiter != "" {
					// A group: the next page starts after every name in it.
					next += "\U0010FFFF"
				}
				last = max(last, next)
				if len(page) == pageSize {
					break
				}
			}
			// The iterator ends without an error when ctx is done before
			// it sends its request: that is no empty page.
			return 0, ctx.Err()
		})
		if err != nil {
			return nil, err
		}
		for _, k := range page {
			name := strings.TrimPrefix(k, full)
			if delimiter != "" {
				name = strings.TrimSuffix(name, delimiter)
			}
			if !seen[name] {
				seen[name] = true
				names = append(names, name)
			}
		}
		if len(page) < pageSize {
			slices.Sort(names)
			return names, nil
		}
		startAfter = last
	}
}

// IsNotExistError is part of remote.Storage: whether err says the object
// does not exist (errors.Is(err, ErrNotExist)).
func (b *Bucket) IsNotExistError(err error) bool {
	return errors.Is(err, ErrNotExist)
}
