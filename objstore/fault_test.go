package objstore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// faultProxy stands between a Bucket and the real server and injects
// faults into chosen requests: answers of its own (503 SlowDown, 500
// InternalError) in place of the server's, or the server's answer cut in
// the middle of its body. Requests it lets through reach the server as they
// are (their Host header too, which their signatures cover).
type faultProxy struct {
	*httptest.Server
	mu       sync.Mutex
	faults   []*fault
	injected map[string]int // by fault name
	requests int            // every request seen
}

// fault injects action into the next n requests that match (n < 0: all).
type fault struct {
	name   string // "slowdown", "internal" or "cut"
	match  func(*http.Request) bool
	n      int
	action func(w http.ResponseWriter, r *http.Request, proxy http.Handler)
}

func newFaultProxy(t *testing.T, endpoint string) *faultProxy {
	target, err := url.Parse(endpoint)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ErrorLog = nil
	p := &faultProxy{injected: map[string]int{}}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f := p.take(r); f != nil {
			f.action(w, r, rp)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *faultProxy) take(r *http.Request) *fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	for _, f := range p.faults {
		if f.n != 0 && f.match(r) {
			if f.n > 0 {
				f.n--
			}
			p.injected[f.name]++
			return f
		}
	}
	return nil
}

func (p *faultProxy) add(name string, match func(*http.Request) bool, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = append(p.faults, &fault{name: name, match: match, n: n, action: actions[name]})
}

func (p *faultProxy) count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected[name]
}

func (p *faultProxy) seen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests
}

func (p *faultProxy) clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults = nil
}

func s3Error(code string, status int) func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
	return func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected</Message><Resource>%s</Resource></Error>`,
			code, r.URL.Path)
	}
}

var actions = map[string]func(w http.ResponseWriter, r *http.Request, proxy http.Handler){
	"slowdown": s3Error("SlowDown", http.StatusServiceUnavailable),
	"internal": s3Error("InternalError", http.StatusInternalServerError),
	"badgw":    s3Error("", http.StatusBadGateway),
	"denied":   s3Error("AccessDenied", http.StatusForbidden),
	// The server's answer, cut after half its body: the connection closes.
	"cut": func(w http.ResponseWriter, r *http.Request, proxy http.Handler) {
		rec := httptest.NewRecorder()
		proxy.ServeHTTP(rec, r)
		for k, vs := range rec.Header() {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.Code)
		body := rec.Body.Bytes()
		_, _ = w.Write(body[:len(body)/2])
		panic(http.ErrAbortHandler)
	},
}

func isGet(r *http.Request) bool {
	return r.Method == http.MethodGet && r.URL.Query().Get("list-type") == ""
}
func isPart(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("uploadId") != ""
}
func isPut(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("uploadId") == ""
}
func isHead(r *http.Request) bool { return r.Method == http.MethodHead }
func isList(r *http.Request) bool { return r.URL.Query().Get("list-type") == "2" }
func isAny(*http.Request) bool    { return true }

// proxied returns a Bucket in a new bucket of the shared server, reached
// through a fault proxy.
func proxied(t *testing.T, edit ...func(*objstore.Config)) (*objstore.Bucket, *faultProxy, *s3server.Server) {
	srv := s3server.Shared(t)
	p := newFaultProxy(t, srv.Endpoint)
	cfg := config(srv, srv.NewBucket(t))
	cfg.Endpoint = p.URL
	for _, e := range edit {
		e(&cfg)
	}
	b, err := objstore.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b, p, srv
}

// Throttling, 5xx answers and answers cut short are retried, counted, and
// leave the objects as written.
func TestRetries(t *testing.T) {
	b, p, _ := proxied(t)
	rng := rand.New(rand.NewPCG(7, 8))
	small := randomBytes(rng, 10_000)
	big := randomBytes(rng, int(objstore.MinPartSize)*2+99)

	p.add("slowdown", isPut, 2)
	p.add("internal", isPart, 2)
	p.add("badgw", isHead, 1)
	p.add("cut", isGet, 2)
	p.add("slowdown", isList, 1)
	require.NoError(t, writeObject(t, b, rng, "small", small))
	require.NoError(t, writeObject(t, b, rng, "big", big))
	for name, want := range map[string][]byte{"small": small, "big": big} {
		got, err := readObject(t, b, name)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), name)
	}
	names, err := b.List("", "")
	require.NoError(t, err)
	require.Equal(t, []string{"big", "small"}, names)

	s := b.Stats()
	require.Equal(t, 2, p.count("slowdown")-1) // one was the list's
	require.Equal(t, int64(2), s.Of(objstore.KindPut).Retries)
	require.Equal(t, int64(3), s.Of(objstore.KindPut).Requests)
	require.Equal(t, int64(2), s.Of(objstore.KindUploadPart).Retries)
	require.Equal(t, int64(5), s.Of(objstore.KindUploadPart).Requests)
	require.Equal(t, int64(1), s.Of(objstore.KindHead).Retries)
	require.Equal(t, int64(2), s.Of(objstore.KindGet).Retries)
	require.Equal(t, int64(1), s.Of(objstore.KindList).Retries)
	require.Equal(t, int64(len(small)+len(big)), s.Of(objstore.KindGet).Bytes, "bytes of the cut answers are not counted")
	require.Equal(t, int64(len(big)), s.Of(objstore.KindUploadPart).Bytes, "bytes of failed parts are not counted")
	require.Zero(t, s.Total().Errors)
	require.Equal(t, int64(p.seen()), s.Total().Requests, "requests the proxy saw")
}

// A request that keeps failing stops at MaxAttempts, or at MaxElapsed,
// whichever comes first, with an error naming the request, the object, the
// bucket, the endpoint and the attempts; errors that do not pass are not
// retried.
func TestRetryBounds(t *testing.T) {
	b, p, _ := proxied(t, func(c *objstore.Config) {
		c.Retry = objstore.RetryPolicy{MaxAttempts: 4, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, MaxElapsed: 10 * time.Second}
	})
	rng := rand.New(rand.NewPCG(9, 10))
	require.NoError(t, writeObject(t, b, rng, "o", []byte("data")))

	p.add("slowdown", isHead, -1)
	_, err := b.Size("o")
	require.ErrorContains(t, err, fmt.Sprintf(`objstore: head "o" in bucket %q at %s (gave up after 4 attempts in `, b.Config().Bucket, p.URL))
	require.ErrorContains(t, err, "HTTP 503: 503 Service Unavailable") // a HEAD's answer has no body
	require.Equal(t, int64(4), b.Stats().Of(objstore.KindHead).Requests)
	require.Equal(t, int64(1), b.Stats().Of(objstore.KindHead).Errors)
	p.clear()

	p.add("denied", isHead, -1)
	_, err = b.Size("o")
	require.ErrorIs(t, err, objstore.ErrAccessDenied)
	require.NotContains(t, err.Error(), "gave up", "access denied is not retried")
	require.Equal(t, int64(5), b.Stats().Of(objstore.KindHead).Requests)
	p.clear()

	// withRetry is a bucket of its own with the policy retry.
	withRetry := func(retry objstore.RetryPolicy, onRetry func(error, int, time.Duration)) *objstore.Bucket {
		c := b.Config()
		c.Retry, c.OnRetry = retry, onRetry
		bf, err := objstore.New(c)
		require.NoError(t, err)
		t.Cleanup(func() { _ = bf.Close() })
		return bf
	}
	// readFailing reads "o" through bf while every GET fails with HTTP
	// 500: the attempts made and the time they took.
	readFailing := func(bf *objstore.Bucket) (int64, time.Duration) {
		p.add("internal", isGet, -1)
		defer p.clear()
		r, _, err := bf.ReadObject(context.Background(), "o")
		require.NoError(t, err)
		start := time.Now()
		err = r.ReadAt(context.Background(), make([]byte, 2), 1)
		took := time.Since(start)
		require.ErrorContains(t, err, `get "o" bytes [1, 3)`)
		require.ErrorContains(t, err, "InternalError (HTTP 500)")
		return bf.Stats().Of(objstore.KindGet).Requests, took
	}

	// MaxElapsed: attempts unbounded (-1, as an URL's retry-for), little
	// time.
	unbounded := withRetry(objstore.RetryPolicy{MaxAttempts: -1, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, MaxElapsed: time.Second}, nil)
	attempts, took := readFailing(unbounded)
	require.Less(t, took, 1500*time.Millisecond, "MaxElapsed of 1s overrun")
	// It gives up when the next wait would pass MaxElapsed, a wait being
	// at most MaxBackoff: not before 0.8 s, however slow the attempts.
	require.Greater(t, took, 750*time.Millisecond, "gave up before MaxElapsed")
	require.GreaterOrEqual(t, attempts, int64(2))
	require.Less(t, attempts, int64(100))
	t.Logf("MaxElapsed 1s: %d attempts in %s", attempts, took)

	// MaxAttempts -1 is no bound on the count: with 3 s, more attempts than
	// the default bound of 10 (each takes ~0.1 s here). Each retry is
	// reported with its attempt's error, which does not say the request
	// gave up (the last error alone does).
	var mu sync.Mutex
	var retries []string
	attempts, _ = readFailing(withRetry(objstore.RetryPolicy{MaxAttempts: -1, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxElapsed: 3 * time.Second},
		func(err error, attempts int, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			retries = append(retries, fmt.Sprintf("%d: %v", attempts, err))
		}))
	require.Greater(t, attempts, int64(10), "MaxAttempts -1 stopped at the default bound")
	mu.Lock()
	require.Len(t, retries, int(attempts)-1, "one report per retry")
	for i, r := range retries {
		require.True(t, strings.HasPrefix(r, fmt.Sprintf("%d: ", i+1)), r)
		require.Contains(t, r, "InternalError (HTTP 500)")
		require.NotContains(t, r, "gave up", "a retry's report")
	}
	mu.Unlock()
	t.Logf("MaxAttempts -1, MaxElapsed 3s: %d attempts", attempts)

	// The caller's context ends the retries.
	r, _, err := unbounded.ReadObject(context.Background(), "o")
	require.NoError(t, err)
	p.add("slowdown", isGet, -1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	err = r.ReadAt(ctx, make([]byte, 2), 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "canceled")
}

// A part that cannot be sent fails the writer: Close returns the error,
// the upload is aborted (no parts stay on the server) and no object is
// made.
func TestFailedMultipartAborts(t *testing.T) {
	b, p, srv := proxied(t, func(c *objstore.Config) {
		c.Retry = objstore.RetryPolicy{MaxAttempts: 2, InitialBackoff: 10 * time.Millisecond}
	})
	rng := rand.New(rand.NewPCG(11, 12))
	p.add("internal", func(r *http.Request) bool { return isPart(r) && r.URL.Query().Get("partNumber") == "2" }, -1)
	err := writeObject(t, b, rng, "big", randomBytes(rng, int(objstore.MinPartSize)*3+1))
	require.Error(t, err)
	require.ErrorContains(t, err, `upload_part "big" part 2`)
	require.ErrorContains(t, err, "gave up after 2 attempts")
	s := b.Stats()
	require.Equal(t, int64(1), s.Of(objstore.KindAbortMultipart).Requests)
	require.Zero(t, s.Of(objstore.KindCompleteMultipart).Requests)

	_, err = b.Size("big")
	require.True(t, b.IsNotExistError(err), "%v", err)
	for u := range srv.Client().ListIncompleteUploads(context.Background(), b.Config().Bucket, "", true) {
		require.NoError(t, u.Err)
		t.Errorf("upload %s of %q left behind", u.UploadID, u.Key)
	}

	// A failed whole-object PUT leaves the object from before as it was.
	require.NoError(t, writeObject(t, b, rng, "small", []byte("before")))
	p.add("internal", isPut, -1)
	require.Error(t, writeObject(t, b, rng, "small", []byte("after")))
	p.clear()
	got, err := readObject(t, b, "small")
	require.NoError(t, err)
	require.Equal(t, "before", string(got))
}

// startOwn starts a server of the test's own (the fault tests stop it) and
// returns a Bucket on it.
func startOwn(t *testing.T, pol objstore.RetryPolicy) (*objstore.Bucket, *s3server.Server) {
	srv := s3server.Start(t)
	cfg := config(srv, srv.Bucket)
	cfg.Retry = pol
	b, err := objstore.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b, srv
}

// The server killed in the middle of a multipart upload and started again:
// the writer's retries ride it out and the object is whole.
func TestServerRestartMidUpload(t *testing.T) {
	t.Parallel() // a server of its own, mostly waited for
	// A restarted server takes 5-20 s here before it takes writes again.
	b, srv := startOwn(t, objstore.RetryPolicy{
		MaxAttempts: 1000, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second,
		AttemptTimeout: 10 * time.Second, MaxElapsed: 3 * time.Minute,
	})
	rng := rand.New(rand.NewPCG(13, 14))
	part := int(objstore.MinPartSize)
	data := randomBytes(rng, 4*part+5)
	w, err := b.CreateObject("big")
	require.NoError(t, err)
	_, err = w.Write(data[:2*part+1]) // part 1 sent, part 2 being filled
	require.NoError(t, err)

	srv.Stop(t)
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(time.Second)
		srv.Start(t)
	}()
	start := time.Now()
	_, err = w.Write(data[2*part+1:]) // parts 2 and 3 go while the server is down
	require.NoError(t, err)
	require.NoError(t, w.Close())
	<-restarted
	t.Logf("upload finished %s after the kill; %d retries", time.Since(start), b.Stats().Total().Retries)
	require.Positive(t, b.Stats().Total().Retries)

	got, err := readObject(t, b, "big")
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
}

// The server killed and not started again: the writer gives up within its
// bound, with an error naming the endpoint; a paused server (SIGSTOP) makes
// reads time out the same way, and once it is resumed they work again.
func TestServerDown(t *testing.T) {
	t.Parallel() // a server of its own, mostly waited for
	pol := objstore.RetryPolicy{
		MaxAttempts: 1000, InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		AttemptTimeout: 500 * time.Millisecond, MaxElapsed: 2 * time.Second,
	}
	b, srv := startOwn(t, pol)
	rng := rand.New(rand.NewPCG(15, 16))
	require.NoError(t, writeObject(t, b, rng, "o", []byte("0123456789")))
	r, _, err := b.ReadObject(context.Background(), "o")
	require.NoError(t, err)

	srv.Pause(t)
	start := time.Now()
	err = r.ReadAt(context.Background(), make([]byte, 3), 2)
	took := time.Since(start)
	require.ErrorIs(t, err, objstore.ErrUnreachable)
	require.ErrorContains(t, err, "endpoint "+srv.Endpoint+" unreachable (gave up after")
	require.Less(t, took, pol.MaxElapsed+time.Second)
	t.Logf("paused server: %v after %s", err, took)
	srv.Resume(t)
	p := make([]byte, 3)
	require.NoError(t, r.ReadAt(context.Background(), p, 2))
	require.Equal(t, "234", string(p))

	srv.Stop(t)
	start = time.Now()
	err = writeObject(t, b, rng, "p", []byte("lost"))
	took = time.Since(start)
	require.ErrorIs(t, err, objstore.ErrUnreachable)
	require.ErrorContains(t, err, fmt.Sprintf(`put "p" (4 bytes) in bucket %q at %s: endpoint %s unreachable (gave up after`, srv.Bucket, srv.Endpoint, srv.Endpoint))
	require.Less(t, took, pol.MaxElapsed+time.Second)
	t.Logf("stopped server: %v after %s", err, took)
	require.True(t, strings.Contains(err.Error(), "connection refused"), "%v", err)
	require.False(t, errors.Is(err, objstore.ErrNotExist))
}
