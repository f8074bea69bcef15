package objstore

import (
	"context"

	"github.com/minio/minio-go/v7"
)

// checkAttempts bounds Check's attempts: an endpoint that is down should be
// reported at Open in a moment, not after a writer's patience.
const checkAttempts = 3

// Check asks the server whether the Bucket can work: it lists one name
// under the prefix (one request, at most three attempts within the retry
// policy's bounds and ctx). Its error says which of these is wrong, marked
// so that errors.Is tells them apart:
//
//   - ErrUnreachable: nothing answers at the endpoint (refused, timed out);
//   - ErrAccessDenied: the server refused the credentials (unknown access
//     key, wrong secret, expired token) or their right to list the bucket;
//   - ErrNoSuchBucket: the bucket does not exist.
//
// It writes nothing, so a read-only user passes it.
func (b *Bucket) Check(ctx context.Context) error {
	pol := b.cfg.Retry
	pol.MaxAttempts = min(pol.MaxAttempts, checkAttempts)
	noOwner := false
	return b.retry(ctx, pol, KindList, b.cfg.Prefix, "(checking the bucket)", func(ctx context.Context) (int64, error) {
		for o := range b.core.ListObjectsIter(ctx, b.cfg.Bucket, minio.ListObjectsOptions{
			Prefix: b.cfg.Prefix, Recursive: true, MaxKeys: 1, FetchOwner: &noOwner,
		}) {
			if o.Err != nil {
				return 0, o.Err
			}
			break
		}
		// The iterator ends without an error when ctx is done before it
		// sends its request.
		return 0, ctx.Err()
	})
}
