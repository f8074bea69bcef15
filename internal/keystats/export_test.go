package keystats

import "time"

// PublishedAt is Live.publishedAt, for the external tests.
func PublishedAt(l *Live) time.Time { return l.publishedAt() }

// BucketCount is Live.bucketCount, for the external tests.
func BucketCount(l *Live) int { return l.bucketCount() }
