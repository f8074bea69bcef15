package objstore

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/minio/minio-go/v7"
)

// The errors a Bucket's methods return are marked with one of these when
// the failure is of their kind; test with errors.Is. Every error names the
// operation, the object (if any), the bucket and the endpoint, and, when
// the request was retried, how many attempts it took and how long.
var (
	// ErrNotExist: the object does not exist (IsNotExistError).
	ErrNotExist = errors.New("objstore: object does not exist")
	// ErrNoSuchBucket: the bucket does not exist.
	ErrNoSuchBucket = errors.New("objstore: bucket does not exist")
	// ErrAccessDenied: the server refused the credentials (unknown access
	// key, wrong secret, expired token) or their permissions.
	ErrAccessDenied = errors.New("objstore: access denied")
	// ErrUnreachable: no answer from the endpoint (connection refused or
	// cut, timeouts) on the request's last attempt.
	ErrUnreachable = errors.New("objstore: endpoint unreachable")
	// ErrClosed: the Bucket was closed.
	ErrClosed = errors.New("objstore: bucket closed")
)

// class is what a failed attempt says about the request: whether to retry,
// and what the final error is marked with.
type class int

const (
	classNotFound    class = iota // no such object
	classNoBucket                 // no such bucket
	classDenied                   // credentials or permissions refused
	classUnreachable              // no answer: refused, cut, timed out
	classThrottled                // 503 SlowDown, 429
	classServer                   // other 5xx
	classClient                   // other 4xx, bad requests, local errors
	classCanceled                 // the caller's context ended
	numClasses
)

var classNames = [numClasses]string{"not_found", "no_bucket", "access_denied", "unreachable", "throttled", "server", "client", "canceled"}

func (c class) String() string { return classNames[c] }

func (c class) retriable() bool {
	return c == classUnreachable || c == classThrottled || c == classServer
}

// classify says what an attempt's error is. The caller's context being
// done is classCanceled; the attempt's own deadline is classUnreachable.
func classify(ctx context.Context, err error) class {
	if ctx.Err() != nil {
		return classCanceled
	}
	if resp := minio.ToErrorResponse(err); resp.StatusCode != 0 || resp.Code != "" {
		switch resp.Code {
		case "NoSuchKey", "NotFound":
			return classNotFound
		case "NoSuchBucket":
			return classNoBucket
		case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
			"InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem":
			return classDenied
		case "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
			"TooManyRequests", "TooManyRequestsException", "RequestThrottled":
			return classThrottled
		case "RequestTimeout", "InternalError", "ServiceUnavailable", "OperationAborted":
			return classServer
		}
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return classNotFound
		case resp.StatusCode == http.StatusForbidden:
			return classDenied
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			return classThrottled
		case resp.StatusCode >= 500:
			return classServer
		}
		return classClient
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return classUnreachable
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return classUnreachable
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return classUnreachable
	}
	return classClient
}

// describe returns an attempt's error with the server's error code and
// HTTP status in front of its message, when it has them.
func describe(err error) error {
	resp := minio.ToErrorResponse(err)
	if resp.StatusCode == 0 && resp.Code == "" {
		return err
	}
	if resp.Code == "" || resp.Code == resp.Message {
		// An answer without a body (to a HEAD): the client made its code
		// and message of the status line.
		return errors.Wrapf(err, "HTTP %d", resp.StatusCode)
	}
	return errors.Wrapf(err, "%s (HTTP %d)", resp.Code, resp.StatusCode)
}

// failure builds the error of a request that failed: what was asked, of
// which object, bucket and endpoint, why (per its class), and the attempts.
func (b *Bucket) failure(k Kind, key, detail string, cause error, cl class, attempts int, elapsed time.Duration) error {
	what := k.String()
	if key != "" {
		what += fmt.Sprintf(" %q", key)
	}
	if detail != "" {
		what += " " + detail
	}
	where := fmt.Sprintf("bucket %q at %s", b.cfg.Bucket, b.cfg.Endpoint)
	tries := ""
	if attempts > 1 {
		tries = fmt.Sprintf(" (gave up after %d attempts in %s)", attempts, elapsed.Round(time.Millisecond))
	}
	cause = describe(cause)
	var err error
	switch cl {
	case classNotFound:
		err = mark(errors.Wrapf(cause, "objstore: %s in %s: no such object", what, where), ErrNotExist)
	case classNoBucket:
		err = mark(errors.Wrapf(cause, "objstore: %s: bucket %q does not exist at %s", what, b.cfg.Bucket, b.cfg.Endpoint), ErrNoSuchBucket)
	case classDenied:
		who := "anonymous requests (AWS_ACCESS_KEY_ID is not set)"
		if b.cfg.AccessKeyID != "" {
			who = fmt.Sprintf("access key id %q", b.cfg.AccessKeyID)
		}
		err = mark(errors.Wrapf(cause, "objstore: %s in %s: access denied to %s", what, where, who), ErrAccessDenied)
	case classUnreachable:
		err = mark(errors.Wrapf(cause, "objstore: %s in %s: endpoint %s unreachable%s", what, where, b.cfg.Endpoint, tries), ErrUnreachable)
	case classCanceled:
		err = errors.Wrapf(cause, "objstore: %s in %s: canceled%s", what, where, tries)
	default:
		err = errors.Wrapf(cause, "objstore: %s in %s%s", what, where, tries)
	}
	return err
}

// marked is an error that is also its mark: errors.Is(err, mark) holds with
// the standard library's errors.Is as with cockroachdb/errors' (both ask
// the Is method), which errors.Mark's marks do not offer.
type marked struct {
	error
	mark error
}

func mark(err, m error) error { return &marked{error: err, mark: m} }

func (e *marked) Unwrap() error { return e.error }

// Is reports whether target is the error's mark.
func (e *marked) Is(target error) bool { return target == e.mark }
