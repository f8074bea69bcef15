package objstore

import (
	"github.com/cockroachdb/pebble/v2/objstorage/remote"
)

// StoreOptions keep a store's SSTs in an object store: the ObjectStore
// field of lsm.Options, whose doc says what the store does with them
// (what goes to the bucket, what stays local, what Open checks). The zero
// value names no object store.
type StoreOptions struct {
	// URL names the object store (ParseURL):
	//
	//	s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:8333&region=us-east-1
	//
	// with the credentials from the AWS environment variables. Unless
	// Storage is set, the store opens a Bucket on it (its retries logged
	// through the store's logger) and closes it at Close. The store
	// records it, without credentials, to name the object store in its
	// messages.
	URL string
	// Storage, if not nil, is the object store instead of a Bucket opened
	// from URL: a Bucket of the caller's (whose Prometheus collector the
	// caller then registers beside the store's), or any other
	// remote.Storage. The caller closes it after the store. URL then only
	// names it and may be empty. If it has a method Check(context.Context)
	// error, as a Bucket has, Open calls it.
	Storage remote.Storage
	// Levels says which new SSTs Pebble creates in the object store:
	// remote.CreateOnSharedAll every one, the flushes into L0 included;
	// remote.CreateOnSharedLower those of L5 and L6 only, the upper levels
	// staying on local disk. Either way every ingested SST (a checkpoint
	// written as SSTs, a GC batch, a metadata change) is copied into the
	// object store. The zero value (remote.CreateOnSharedNone) means
	// remote.CreateOnSharedAll.
	Levels remote.CreateOnSharedStrategy
	// CacheSize is the size of Pebble's secondary cache: blocks of remote
	// SSTs kept in a file on local disk, in Pebble's directory, for the
	// reads that miss the block cache. 0 means none.
	CacheSize int64
}
