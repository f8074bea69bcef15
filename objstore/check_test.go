package objstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// Check tells a good configuration from wrong credentials, a missing
// bucket and an unreachable endpoint, each named in its error.
func TestCheck(t *testing.T) {
	b, srv := newBucket(t)
	ctx := context.Background()
	require.NoError(t, b.Check(ctx))
	good := b.Config()

	check := func(edit func(*objstore.Config)) error {
		c := good
		edit(&c)
		b, err := objstore.New(c)
		require.NoError(t, err)
		defer b.Close()
		return b.Check(ctx)
	}

	err := check(func(c *objstore.Config) { c.SecretAccessKey = "wrong" })
	require.ErrorIs(t, err, objstore.ErrAccessDenied)
	require.ErrorContains(t, err, "access denied to access key id "+`"`+srv.AccessKey+`"`)
	require.ErrorContains(t, err, srv.Endpoint)
	require.ErrorContains(t, err, "SignatureDoesNotMatch")
	require.NotContains(t, err.Error(), "wrong", "the secret is not shown")

	err = check(func(c *objstore.Config) { c.AccessKeyID = "AKNOBODY" })
	require.ErrorIs(t, err, objstore.ErrAccessDenied)
	require.ErrorContains(t, err, `access key id "AKNOBODY"`)
	require.ErrorContains(t, err, "InvalidAccessKeyId")

	err = check(func(c *objstore.Config) { c.AccessKeyID, c.SecretAccessKey = "", "" })
	require.ErrorIs(t, err, objstore.ErrAccessDenied)
	require.ErrorContains(t, err, "anonymous requests (AWS_ACCESS_KEY_ID is not set)")

	err = check(func(c *objstore.Config) { c.Bucket = "no-such-bucket-here" })
	require.ErrorIs(t, err, objstore.ErrNoSuchBucket)
	require.ErrorContains(t, err, `bucket "no-such-bucket-here" does not exist at `+srv.Endpoint)

	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	start := time.Now()
	err = check(func(c *objstore.Config) { c.Endpoint = dead })
	require.ErrorIs(t, err, objstore.ErrUnreachable)
	require.ErrorContains(t, err, "endpoint "+dead+" unreachable (gave up after 3 attempts")
	require.ErrorContains(t, err, "connection refused")
	t.Logf("unreachable endpoint reported in %s: %v", time.Since(start), err)

	// None of them is another's.
	require.NotErrorIs(t, err, objstore.ErrAccessDenied)
	require.NotErrorIs(t, err, objstore.ErrNoSuchBucket)

	// The caller's deadline bounds Check.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	c := good
	c.Endpoint = dead
	b2, err := objstore.New(c)
	require.NoError(t, err)
	defer b2.Close()
	err = b2.Check(cctx)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "canceled")
}
