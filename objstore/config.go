package objstore

import (
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// Config says which bucket a Bucket works in and how it talks to the
// server. Only Bucket is required; the zero value of every other field
// means its documented default.
type Config struct {
	// Endpoint is the server's URL, scheme and host only:
	// "http://127.0.0.1:8333", "https://s3.eu-west-1.amazonaws.com". Empty
	// means AWS S3 in Region, over https.
	Endpoint string
	// Region is the region requests are signed for; empty means
	// DefaultRegion.
	Region string
	// Bucket is the bucket's name.
	Bucket string
	// Prefix is put in front of every object name, as it is: "store-1/"
	// keeps the objects under store-1/ (ParseURL adds the trailing slash).
	// Empty means the bucket's root.
	Prefix string

	// AccessKeyID, SecretAccessKey and SessionToken sign the requests (AWS
	// Signature Version 4); an empty AccessKeyID means anonymous requests.
	AccessKeyID, SecretAccessKey, SessionToken string

	// PartSize is the size of the parts of a multipart upload: an object
	// written through CreateObject goes up in one PUT when it ends within
	// PartSize bytes, else in parts of PartSize bytes (the last one
	// shorter). 0 means DefaultPartSize; S3 refuses parts below 5 MiB
	// (MinPartSize) but the last.
	PartSize int64
	// UploadConcurrency is how many parts of one object are uploaded at
	// once while the writer fills the next; each holds a buffer of
	// PartSize bytes. 0 means 2.
	UploadConcurrency int
	// Retry bounds the retries of requests that failed for a reason that
	// may pass (see RetryPolicy).
	Retry RetryPolicy

	// Transport carries the HTTP requests; nil means a transport of the
	// Bucket's own (keep-alive connections, up to 64 idle ones).
	Transport http.RoundTripper

	// OnRetry, if set, is called before each retry of a request with the
	// failed attempt's error (it names the request, the object, the bucket
	// and the endpoint, as a request's error does), the number of attempts
	// so far and the wait before the next one: for a log of the retries
	// (a store logs them). It is called from the request's goroutine, many
	// at once, and must be fast.
	OnRetry func(err error, attempts int, wait time.Duration)
}

// RetryPolicy bounds how a Bucket retries a request that failed for a
// reason that may pass: the server throttling (503 SlowDown, 429), a 5xx
// answer, a timeout, a connection refused or cut. Other failures (4xx: no
// such object, access denied, ...) are returned at once. The zero value of
// each field means its default.
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of one request, the first included;
	// 0 means 10, 1 means no retries, and a negative value means no bound
	// but MaxElapsed.
	MaxAttempts int
	// InitialBackoff is the wait before the first retry; each retry waits
	// twice as long as the one before, up to MaxBackoff, with random
	// jitter (between half and all of it). 0 means 50ms and 2s.
	InitialBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds each attempt, from sending the request to the
	// last byte of the answer; 0 means 30s.
	AttemptTimeout time.Duration
	// MaxElapsed bounds one request with all its attempts and waits: no
	// attempt starts or goes on past it. 0 means 2 minutes.
	MaxElapsed time.Duration
}

// defaultMaxElapsed is RetryPolicy.MaxElapsed's default.
const defaultMaxElapsed = 2 * time.Minute

// Defaults of the zero values of Config and RetryPolicy.
const (
	DefaultRegion     = "us-east-1"
	DefaultPartSize   = 8 << 20
	MinPartSize       = 5 << 20
	maxPartSize       = 5 << 30
	defaultUploadConc = 2
)

func (p RetryPolicy) withDefaults() RetryPolicy {
	switch {
	case p.MaxAttempts == 0:
		p.MaxAttempts = 10
	case p.MaxAttempts < 0:
		p.MaxAttempts = math.MaxInt
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 50 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 2 * time.Second
	}
	if p.MaxBackoff < p.InitialBackoff {
		p.MaxBackoff = p.InitialBackoff
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = 30 * time.Second
	}
	if p.MaxElapsed <= 0 {
		p.MaxElapsed = defaultMaxElapsed
	}
	return p
}

// withDefaults returns c with the defaults filled in, or an error naming
// the field that is wrong.
func (c Config) withDefaults() (Config, error) {
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if err := checkBucketName(c.Bucket); err != nil {
		return c, err
	}
	if c.Endpoint == "" {
		c.Endpoint = "https://s3." + c.Region + ".amazonaws.com"
	}
	if _, err := parseEndpoint(c.Endpoint); err != nil {
		return c, err
	}
	if err := checkPrefix(c.Prefix); err != nil {
		return c, err
	}
	if c.AccessKeyID == "" && (c.SecretAccessKey != "" || c.SessionToken != "") {
		return c, errors.New("objstore: a secret access key or session token without an access key id")
	}
	if c.AccessKeyID != "" && c.SecretAccessKey == "" {
		return c, errors.Newf("objstore: access key id %q without a secret access key", c.AccessKeyID)
	}
	switch {
	case c.PartSize == 0:
		c.PartSize = DefaultPartSize
	case c.PartSize < MinPartSize || c.PartSize > maxPartSize:
		return c, errors.Newf("objstore: part size %d is out of S3's range [%d, %d]", c.PartSize, MinPartSize, maxPartSize)
	}
	switch {
	case c.UploadConcurrency == 0:
		c.UploadConcurrency = defaultUploadConc
	case c.UploadConcurrency < 0:
		return c, errors.Newf("objstore: upload concurrency %d is negative", c.UploadConcurrency)
	}
	c.Retry = c.Retry.withDefaults()
	return c, nil
}

// parseEndpoint checks an endpoint URL: http or https, a host, nothing
// else.
func parseEndpoint(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, errors.Newf("objstore: endpoint %q is not a URL: %v", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, errors.Newf("objstore: endpoint %q: scheme %q is neither http nor https", s, u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, errors.Newf("objstore: endpoint %q has no host", s)
	}
	if u.User != nil {
		return nil, errors.Newf("objstore: endpoint %q carries credentials; use the AWS environment variables", u.Redacted())
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.Newf("objstore: endpoint %q has a path, query or fragment; it is scheme://host[:port] only", s)
	}
	return u, nil
}

// checkBucketName checks a bucket name against S3's rules: 3 to 63
// lowercase letters, digits, dots and hyphens, starting and ending with a
// letter or digit.
func checkBucketName(name string) error {
	if name == "" {
		return errors.New("objstore: no bucket name")
	}
	if len(name) < 3 || len(name) > 63 {
		return errors.Newf("objstore: bucket name %q: %d characters, not 3 to 63", name, len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '.' && c != '-' {
			return errors.Newf("objstore: bucket name %q: character %q at %d (lowercase letters, digits, '.' and '-' only)", name, c, i)
		}
		if !alnum && (i == 0 || i == len(name)-1) {
			return errors.Newf("objstore: bucket name %q must start and end with a letter or digit", name)
		}
	}
	if strings.Contains(name, "..") {
		return errors.Newf("objstore: bucket name %q has two dots in a row", name)
	}
	return nil
}

// checkPrefix refuses prefixes S3 would mangle or refuse: control
// characters, a leading slash, empty or dot path segments.
func checkPrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > 512 {
		return errors.Newf("objstore: prefix of %d bytes is too long (at most 512)", len(p))
	}
	for i := 0; i < len(p); i++ {
		if p[i] < 0x20 || p[i] == 0x7f {
			return errors.Newf("objstore: prefix %q has a control character at %d", p, i)
		}
	}
	segs := strings.Split(strings.TrimSuffix(p, "/"), "/")
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return errors.Newf("objstore: prefix %q has an empty, '.' or '..' segment", p)
		}
	}
	return nil
}

// String returns c as a URL that ParseURL reads back: the bucket, the
// prefix, the endpoint, the region and the retries' bound (when it is not
// the default), never the credentials.
func (c Config) String() string {
	u := url.URL{Scheme: "s3", Host: c.Bucket, Path: "/" + c.Prefix}
	q := url.Values{}
	if c.Endpoint != "" {
		q.Set("endpoint", c.Endpoint)
	}
	if c.Region != "" {
		q.Set("region", c.Region)
	}
	if d := c.Retry.MaxElapsed; d > 0 && d != defaultMaxElapsed {
		q.Set("retry-for", d.String())
	}
	u.RawQuery = q.Encode()
	if u.Path == "/" {
		u.Path = ""
	}
	return u.String()
}
