package objstore

import (
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// ParseURL reads an object-store URL into a Config:
//
//	s3://BUCKET[/PREFIX][?endpoint=http://127.0.0.1:8333][&region=us-east-1][&retry-for=2m]
//
// PREFIX (empty: the bucket's root) gets a trailing slash if it has none.
// The endpoint defaults to $AWS_ENDPOINT_URL_S3, then $AWS_ENDPOINT_URL,
// then AWS S3 in the region; the region to $AWS_REGION, then
// $AWS_DEFAULT_REGION, then DefaultRegion. retry-for (a Go duration: 30s,
// 2m) is how long each request goes on retrying: RetryPolicy.MaxElapsed,
// with no bound on the attempts (MaxAttempts -1). The credentials come from the
// standard variables only, never from the URL: AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (none set: anonymous
// requests). An error names the part of the URL that is wrong and never
// repeats a password.
func ParseURL(raw string) (Config, error) {
	return parseURL(raw, os.Getenv)
}

// urlParams are the query parameters ParseURL knows.
var urlParams = map[string]bool{"endpoint": true, "region": true, "retry-for": true}

func parseURL(raw string, getenv func(string) string) (Config, error) {
	var c Config
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the whole URL; a password in it stays out.
		return c, errors.Newf("objstore: object store URL is not a URL: %v", redactedParseError(err))
	}
	shown := redacted(u)
	if u.Scheme != "s3" {
		if u.Scheme == "" {
			return c, errors.Newf("objstore: object store URL %q has no scheme; it is s3://BUCKET/PREFIX", shown)
		}
		return c, errors.Newf("objstore: object store URL %q: scheme %q is not s3", shown, u.Scheme)
	}
	if u.User != nil {
		return c, errors.Newf("objstore: object store URL %q carries credentials; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead", shown)
	}
	if u.Opaque != "" {
		return c, errors.Newf("objstore: object store URL %q: no bucket (it is s3://BUCKET/PREFIX)", shown)
	}
	if u.Port() != "" {
		return c, errors.Newf("objstore: object store URL %q: bucket %q has a port; the server goes in ?endpoint=", shown, u.Host)
	}
	if u.Fragment != "" {
		return c, errors.Newf("objstore: object store URL %q has a fragment (#%s)", shown, u.Fragment)
	}
	c.Bucket = u.Host
	if err := checkBucketName(c.Bucket); err != nil {
		return c, errors.Wrapf(err, "object store URL %q", shown)
	}
	c.Prefix = strings.TrimPrefix(u.Path, "/")
	if c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/") {
		c.Prefix += "/"
	}
	if err := checkPrefix(c.Prefix); err != nil {
		return c, errors.Wrapf(err, "object store URL %q", shown)
	}

	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return c, errors.Newf("objstore: object store URL %q: query: %v", shown, err)
	}
	for k, vs := range q {
		if !urlParams[k] {
			known := make([]string, 0, len(urlParams))
			for p := range urlParams {
				known = append(known, p)
			}
			sort.Strings(known)
			return c, errors.Newf("objstore: object store URL %q: unknown parameter %q (known: %s)", shown, k, strings.Join(known, ", "))
		}
		if len(vs) != 1 {
			return c, errors.Newf("objstore: object store URL %q: parameter %q given %d times", shown, k, len(vs))
		}
	}
	if q.Has("region") && q.Get("region") == "" {
		return c, errors.Newf("objstore: object store URL %q: empty region", shown)
	}
	c.Region = first(q.Get("region"), getenv("AWS_REGION"), getenv("AWS_DEFAULT_REGION"), DefaultRegion)
	if q.Has("endpoint") {
		c.Endpoint = q.Get("endpoint")
		if c.Endpoint == "" {
			return c, errors.Newf("objstore: object store URL %q: empty endpoint", shown)
		}
	} else {
		c.Endpoint = first(getenv("AWS_ENDPOINT_URL_S3"), getenv("AWS_ENDPOINT_URL"))
	}
	if c.Endpoint != "" {
		if _, err := parseEndpoint(c.Endpoint); err != nil {
			return c, errors.Wrapf(err, "object store URL %q", shown)
		}
	}

	if q.Has("retry-for") {
		d, err := time.ParseDuration(q.Get("retry-for"))
		if err != nil || d <= 0 {
			return c, errors.Newf("objstore: object store URL %q: retry-for %q is not a positive duration (such as 30s or 2m)", shown, q.Get("retry-for"))
		}
		c.Retry.MaxElapsed, c.Retry.MaxAttempts = d, -1
	}

	c.AccessKeyID = getenv("AWS_ACCESS_KEY_ID")
	c.SecretAccessKey = getenv("AWS_SECRET_ACCESS_KEY")
	c.SessionToken = getenv("AWS_SESSION_TOKEN")
	switch {
	case c.AccessKeyID == "" && c.SecretAccessKey != "":
		return c, errors.New("objstore: AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not")
	case c.AccessKeyID != "" && c.SecretAccessKey == "":
		return c, errors.Newf("objstore: AWS_ACCESS_KEY_ID is set (%q) but AWS_SECRET_ACCESS_KEY is not", c.AccessKeyID)
	case c.AccessKeyID == "" && c.SessionToken != "":
		return c, errors.New("objstore: AWS_SESSION_TOKEN is set but AWS_ACCESS_KEY_ID is not")
	}
	return c, nil
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// redactedParseError returns url.Parse's error without the URL it quotes
// (which may hold a password).
func redactedParseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redacted returns u for an error message: without the password of u or of
// its endpoint parameter (and without a query it cannot read).
func redacted(u *url.URL) string {
	c := *u
	q, err := url.ParseQuery(c.RawQuery)
	if err != nil {
		c.RawQuery = ""
		return c.Redacted() + "?(query not shown)"
	}
	if e, err := url.Parse(q.Get("endpoint")); err == nil && e.User != nil {
		q.Set("endpoint", e.Redacted())
		c.RawQuery = q.Encode()
	}
	return c.Redacted()
}
