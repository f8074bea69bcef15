package lsm_test

import (
	"context"
	"errors"
	"log"

	"github.com/lsmstats/lsmstats/lsm"
	"github.com/lsmstats/lsmstats/objstore"
)

// ExampleRestore backs a store on an object store up after its commits,
// and brings it back on an empty directory after its disk was lost: the
// store opens at the committed epoch of its last backup. (It needs an S3
// server, so it is compiled, not run; TestBackupRestore runs the same
// against SeaweedFS.)
func ExampleRestore() {
	ctx := context.Background()
	opts := &lsm.Options{ObjectStore: &objstore.StoreOptions{URL: "s3://stores/prod?endpoint=http://127.0.0.1:8333"}}
	s, err := lsm.Open("/var/lib/lsmstats/node-1", opts)
	if err != nil {
		log.Fatal(err)
	}
	// ... writers insert rows at an epoch, seal it, and s.Commit(epoch) ...
	info, err := s.Backup(ctx, "node-1")
	if err != nil {
		log.Fatal(err) // the commit is on local disk only until a backup succeeds
	}
	log.Printf("backup %d: epoch %d, %d files (%d bytes) referencing %d SSTs", info.Seq, info.Epoch, info.Files, info.Bytes, info.Objects)
	_ = s.Close()

	// The disk is lost. On a new one, the same directory, empty:
	info, err = lsm.Restore(ctx, "/var/lib/lsmstats/node-1", opts, "node-1")
	switch {
	case errors.Is(err, lsm.ErrNoBackup):
		log.Fatal("node-1 was never backed up")
	case errors.Is(err, lsm.ErrStoreExists):
		// The directory holds a store: open it as it is.
	case err != nil:
		log.Fatal(err)
	default:
		log.Printf("restored backup %d at epoch %d", info.Seq, info.Epoch)
	}
	s, err = lsm.Open("/var/lib/lsmstats/node-1", opts)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()
}
