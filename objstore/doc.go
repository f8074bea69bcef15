// Package objstore keeps Pebble's SSTs in an S3-compatible bucket: Bucket
// is Pebble's remote.Storage (objstorage/remote) on the minio-go S3 client,
// with bounded, counted retries, errors that name what failed, and a
// Prometheus collector of its requests.
//
// # Use
//
// A Config names the endpoint, region, bucket, prefix and credentials; New
// checks it (an error names the field that is wrong) and sends nothing.
// ParseURL reads the same from a URL,
//
//	s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:8333&region=us-east-1
//
// with the credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
// AWS_SESSION_TOKEN, never from the URL (Config.String prints the URL back
// without them). Check asks the server whether the endpoint answers, the
// credentials are accepted and the bucket exists, and says which is wrong
// (ErrUnreachable, ErrAccessDenied, ErrNoSuchBucket); a store calls it at
// Open. Object name N is the S3 key Config.Prefix+N, so stores that share a
// bucket under different prefixes never see each other's objects.
//
// # Requests
//
// ReadObject asks the object's size (HEAD) and returns a reader whose
// ReadAt is one ranged GET, checked against the answer's Content-Range (a
// server that ignored the range would otherwise pass the object's first
// bytes off as the range's); reads past the size are refused without a
// request. ReadTail reads an object's last bytes in one GET of a suffix
// range, whose Content-Range also says the object's size: no HEAD
// (NewTailReadable opens an SST's properties that way; a TailKeeper in
// front of the Bucket serves them from the bytes it uploaded, when it
// wrote the SST). CreateObject's writer sends an object of up to Config.PartSize
// bytes (8 MiB by default, at least S3's 5 MiB) in one PUT at Close, a
// longer one in a multipart upload whose parts go while the writer fills
// the next (Config.UploadConcurrency at once); every body carries its MD5,
// which the server checks, and a failed upload is aborted, so it leaves
// neither parts nor an object. List pages through ListObjectsV2 (1,000
// names a request), Delete is a DELETE (S3 answers one for a missing object
// as a success), Size a HEAD.
//
// Each request is retried when it failed for a reason that may pass:
// throttling (503 SlowDown, 429), another 5xx, a timeout, a connection
// refused or cut, an answer cut short. RetryPolicy bounds the attempts
// (MaxAttempts), each attempt (AttemptTimeout), and the request with all
// its attempts and backoffs (MaxElapsed: no attempt runs past it);
// backoffs double from InitialBackoff to MaxBackoff, with jitter. Other
// failures (no such object, access denied, other 4xx) are returned at
// once. The error of a request names its kind, the object's key, the
// bucket and the endpoint, the server's error code and HTTP status, and,
// if it was retried, its attempts and their time; it is marked ErrNotExist,
// ErrNoSuchBucket, ErrAccessDenied or ErrUnreachable when it is of that
// kind (errors.Is, the standard library's or cockroachdb/errors'). Secrets
// never appear in errors.
//
// Stats counts, per kind of request (Kind: get, head, put, create_multipart,
// upload_part, complete_multipart, abort_multipart, list, delete), the HTTP
// requests (retries included), the retries, the failures after retries
// (not-found answers apart), the bytes of object data moved, and the
// attempts' time. The Bucket is a prometheus.Collector of the same:
// lsmstats_objstore_requests_total, _retries_total, _bytes_total,
// _errors_total (by kind and class of failure) and the histogram
// lsmstats_objstore_request_duration_seconds; register several Buckets
// under labels of the caller's (prometheus.WrapRegistererWith).
//
// A Bucket and its readers are safe for concurrent use; a writer is not.
// The package's tests run against a real S3 server, SeaweedFS on loopback
// (internal/s3server; `make objstore` builds it), never a fake.
//
// # Pebble's shared storage, as the tests (pebble_test.go) show it
//
// Configuration. Options.Experimental.RemoteStorage is a factory from
// locators (names stored in Pebble's catalog, so never secrets) to
// remote.Storage; remote.MakeSimpleFactory maps fixed ones.
// CreateOnShared says which new SSTs go there: CreateOnSharedAll every one
// (flushes into L0 included), CreateOnSharedLower those written into L5
// and L6 (remote.SharedLevelsStart), CreateOnSharedNone none; they go to
// the storage of CreateOnSharedLocator. The format major version must be
// at least FormatMinForSharedObjects. DB.SetCreatorID must be called on a
// new store before its first SST is made (right after Open): until then
// creating a shared object fails ("remote creator ID not yet set"). The id
// is kept in the catalog; calling it again with the same id is a no-op,
// with another one an error ("attempt to change CreatorID"), a panic in
// Pebble's invariants builds (-race): a store keeps its id where it can
// check it before it calls. Pebble's API does not tell the id it has.
//
// What goes to the bucket. With CreateOnSharedAll: the SSTs of flushes and
// compactions, and ingested SSTs. An ingestion copies each file into the
// bucket before its MANIFEST edit, whatever level the file lands in, as
// soon as CreateOnShared is not None (LinkOrCopyFromLocal with
// PreferSharedStorage), and removes the local file, as on local disk. A
// compaction that moves an SST down as it is keeps its object (same name);
// with CreateOnSharedLower, moving a local SST into L5/L6 copies it into
// the bucket. Outputs on shared storage get no value separation (no blob
// files). Each SST is an object named
//
//	HASH-CREATOR-FILENUM.sst           e.g. 7913-7-000010.sst
//
// with HASH = uint16(creator*7459 + filenum*17539) as 4 hex digits (it
// spreads the keys over S3's partitions), CREATOR the creator id and
// FILENUM the creator's file number (6 digits at least); beside it, an
// empty reference marker HASH-CREATOR-FILENUM.sst.ref.REF-CREATOR.REF-FILENUM
// for each store that uses it (its creator, under its own file number).
// Pebble's own paths for remote SSTs, in its errors and events, are
// "remote-LOCATOR://NAME", without the Bucket's prefix.
//
// What stays local: the WAL (NNNNNN.log), MANIFEST-NNNNNN, OPTIONS-NNNNNN,
// LOCK, the markers (format version, manifest, remote-obj-catalog), and
// REMOTE-OBJ-CATALOG-NNNNNN: the creator id and, per remote SST, its file
// number, creator id, creator file number, cleanup method and locator. The
// bucket holds SST bodies only: without the local directory (its MANIFEST
// and catalog) they are not a database.
//
// Requests. Making an SST costs its PUT (or multipart upload) and the
// marker's PUT. Reading one: a HEAD when Pebble's file cache opens it, then
// a GET per read Pebble makes (its remote readahead reads up to 1 MiB ahead
// for iterators, 8 MiB for compactions; every block-cache miss is a
// request, unless Options.Experimental.SecondaryCacheSizeBytes gives it a
// cache on local disk). Deleting one (after a compaction): DELETE the
// marker, LIST the markers left, DELETE the object when none is. Open
// reads the catalog and the MANIFEST locally and sends no request for the
// SSTs it lists (it opens them at their first read); it only writes the
// SST of the WAL it replays (two PUTs in the test).
//
// Moving a span between stores (pebble_move_test.go). Two DBs of their own
// creator ids under one prefix: ScanInternal on one, with a shared-file
// visitor, hands its SSTs of L5 and L6 that overlap the span as
// SharedSSTMetas cut to it, and every other key of the span (memtables and
// L0–L4, also SSTs in the bucket) as a point; IngestAndExcise on the
// other takes those metas as virtual SSTs of the same levels (a reference
// marker NAME.ref.CREATOR.FILENUM of its own beside each object), with
// local SSTs inside the span and outside it, in one edit; Excise on the
// first removes the span, and each object stays while a marker names it,
// across compactions and reopens of both. On the destination Pebble's
// properties of such a virtual SST are its whole backing file's (its
// backing size is set to the virtual SST's). What it cannot do: a
// SINGLEDEL above L5 panics ScanInternal ("cannot process singledel key
// in point collapsing iterator"), and a destination whose storage has
// another prefix fails the ingestion (the backing names the object by
// locator, creator and file number, and the destination looks for the
// source's marker under its own prefix).
//
// Faults. An SST missing from the bucket is not noticed at Open; the first
// read of it fails with Pebble's corruption error (naming the file number,
// with this package's error naming the key) and raises Pebble's
// DataCorruption event, whose default handler is the logger's Fatalf: a
// store must install its own. With the server down during a flush, the
// flush's upload fails after the Bucket's retries (MaxElapsed), Pebble
// reports a background error and schedules the flush again at once, with
// no backoff of its own, so each attempt lasts MaxElapsed; DB.Flush waits
// until one succeeds, writes go on into the WAL and the memtables until
// these are full and then stall; nothing acknowledged is lost. The
// attempts that failed can leave orphans: SSTs that reached the bucket
// without their marker (the marker's PUT failed, or a PUT that timed out
// at the client landed at the server). Pebble never deletes those, nor
// objects whose deletion failed, nor the object of a writer it aborted
// while the writer had no error (Writable.Abort closes the writer, which
// then uploads what it holds): a
// store on a bucket needs a sweep of objects under its prefix and creator
// id that its catalog does not list.
package objstore
