package objstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// clearAWSEnv unsets the variables ParseURL reads, for the test.
func clearAWSEnv(t *testing.T) {
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"} {
		t.Setenv(v, "")
	}
}

func TestParseURL(t *testing.T) {
	clearAWSEnv(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	t.Setenv("AWS_SESSION_TOKEN", "TOKEN")

	c, err := objstore.ParseURL("s3://my-bucket/stores/one?endpoint=http://127.0.0.1:8333&region=eu-west-1")
	require.NoError(t, err)
	require.Equal(t, objstore.Config{
		Endpoint: "http://127.0.0.1:8333", Region: "eu-west-1", Bucket: "my-bucket", Prefix: "stores/one/",
		AccessKeyID: "AKID", SecretAccessKey: "SECRET", SessionToken: "TOKEN",
	}, c)
	// String gives the URL back, without the credentials.
	s := c.String()
	require.NotContains(t, s, "SECRET")
	require.NotContains(t, s, "AKID")
	c2, err := objstore.ParseURL(s)
	require.NoError(t, err)
	require.Equal(t, c, c2)

	c, err = objstore.ParseURL("s3://bucket.with.dots")
	require.NoError(t, err)
	require.Equal(t, "", c.Prefix)
	require.Equal(t, "", c.Endpoint, "AWS S3, chosen by New")
	require.Equal(t, objstore.DefaultRegion, c.Region)
	c2, err = objstore.ParseURL(c.String())
	require.NoError(t, err)
	require.Equal(t, c, c2)

	c, err = objstore.ParseURL("s3://b12/p/")
	require.NoError(t, err)
	require.Equal(t, "p/", c.Prefix)

	// retry-for bounds each request's retries, and String keeps it.
	c, err = objstore.ParseURL("s3://b12/p?retry-for=15s")
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, c.Retry.MaxElapsed)
	require.Equal(t, -1, c.Retry.MaxAttempts, "retry-for, not an attempt count, bounds the retries")
	require.Contains(t, c.String(), "retry-for=15s")
	c2, err = objstore.ParseURL(c.String())
	require.NoError(t, err)
	require.Equal(t, c, c2)

	t.Setenv("AWS_REGION", "ap-south-1")
	t.Setenv("AWS_ENDPOINT_URL_S3", "https://minio.example:9000")
	c, err = objstore.ParseURL("s3://b12")
	require.NoError(t, err)
	require.Equal(t, "ap-south-1", c.Region)
	require.Equal(t, "https://minio.example:9000", c.Endpoint)

	b, err := objstore.New(objstore.Config{Bucket: "abc", Region: "us-west-2"})
	require.NoError(t, err)
	require.Equal(t, "https://s3.us-west-2.amazonaws.com", b.Config().Endpoint)
	require.Equal(t, int64(objstore.DefaultPartSize), b.Config().PartSize)
}

func TestParseURLCredentials(t *testing.T) {
	clearAWSEnv(t)
	c, err := objstore.ParseURL("s3://abc")
	require.NoError(t, err)
	require.Empty(t, c.AccessKeyID, "no variables: anonymous")

	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	_, err = objstore.ParseURL("s3://abc")
	require.ErrorContains(t, err, "AWS_SECRET_ACCESS_KEY is not")

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "S")
	_, err = objstore.ParseURL("s3://abc")
	require.ErrorContains(t, err, "AWS_ACCESS_KEY_ID is not")

	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SESSION_TOKEN", "T")
	_, err = objstore.ParseURL("s3://abc")
	require.ErrorContains(t, err, "AWS_SESSION_TOKEN is set but AWS_ACCESS_KEY_ID is not")
}

// Each bad URL gets an error that names the part that is wrong, and none
// repeats a password.
func TestParseURLErrors(t *testing.T) {
	clearAWSEnv(t)
	for _, tc := range []struct{ url, want string }{
		{"", "no scheme"},
		{"my-bucket/prefix", "no scheme"},
		{"http://my-bucket/prefix", `scheme "http" is not s3`},
		{"S3://my-bucket", ""}, // url lowercases the scheme: accepted
		{"s3://", "no bucket name"},
		{"s3:///prefix", "no bucket name"},
		{"s3:bucket", "no bucket"},
		{"s3://ab", `bucket name "ab": 2 characters`},
		{"s3://" + strings.Repeat("a", 64), "64 characters"},
		{"s3://My-Bucket", `character 'M'`},
		{"s3://my_bucket", `character '_'`},
		{"s3://-bucket", "must start and end with a letter or digit"},
		{"s3://a..b", "two dots"},
		{"s3://bucket:9000", "has a port"},
		{"s3://user:hunter2@bucket", "carries credentials"},
		{"s3://bucket/p#frag", "fragment"},
		{"s3://bucket/a//b", `prefix "a//b/" has an empty`},
		{"s3://bucket/a/../b", "'..' segment"},
		{"s3://bucket/a%01b", "control character"},
		{"s3://bucket?endpoint=", "empty endpoint"},
		{"s3://bucket?endpoint=127.0.0.1:8333", "endpoint"},
		{"s3://bucket?endpoint=ftp://host", `scheme "ftp" is neither http nor https`},
		{"s3://bucket?endpoint=http://", "has no host"},
		{"s3://bucket?endpoint=http://host/path", "has a path"},
		{"s3://bucket?endpoint=http://u:hunter2@host", "carries credentials"},
		{"s3://bucket?region=", "empty region"},
		{"s3://bucket?regoin=us-east-1", `unknown parameter "regoin" (known: endpoint, region, retry-for)`},
		{"s3://bucket?region=a&region=b", `parameter "region" given 2 times`},
		{"s3://bucket?retry-for=ten", `retry-for "ten" is not a positive duration`},
		{"s3://bucket?retry-for=-1s", `retry-for "-1s" is not a positive duration`},
		{"s3://bucket?%zz", "query"},
		{"s3://bu cket", "not a URL"},
	} {
		_, err := objstore.ParseURL(tc.url)
		if tc.want == "" {
			require.NoError(t, err, tc.url)
			continue
		}
		require.Error(t, err, tc.url)
		require.Contains(t, err.Error(), tc.want, tc.url)
		require.NotContains(t, err.Error(), "hunter2", tc.url)
	}
}

// New refuses a Config with a field that is wrong, naming it.
func TestConfigErrors(t *testing.T) {
	ok := objstore.Config{Bucket: "abc", Endpoint: "http://127.0.0.1:1"}
	for _, tc := range []struct {
		edit func(*objstore.Config)
		want string
	}{
		{func(c *objstore.Config) { c.Bucket = "" }, "no bucket name"},
		{func(c *objstore.Config) { c.Endpoint = "localhost:9000" }, "endpoint"},
		{func(c *objstore.Config) { c.Prefix = "/abs" }, "empty, '.' or '..' segment"},
		{func(c *objstore.Config) { c.PartSize = 1 << 20 }, "part size 1048576 is out of S3's range"},
		{func(c *objstore.Config) { c.UploadConcurrency = -1 }, "upload concurrency -1"},
		{func(c *objstore.Config) { c.SecretAccessKey = "s" }, "without an access key id"},
		{func(c *objstore.Config) { c.AccessKeyID = "AK" }, `access key id "AK" without a secret`},
	} {
		c := ok
		tc.edit(&c)
		_, err := objstore.New(c)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := objstore.New(ok)
	require.NoError(t, err)
}
