package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/cluster"
	"github.com/lsmstats/lsmstats/lsm"
)

// nodeCmd runs one store node of a cluster (lsmstats node): it opens the
// store in --dir on the object store, serves the node's gRPC service on
// --listen and writes the address it serves on to stdout; the
// coordinator (lsmstats backfill --nodes) drives it. It ends on the
// coordinator's Stop, or on SIGINT/SIGTERM.
func nodeCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the node's store directory (its WAL and MANIFEST; created if missing)")
	url := fs.String("object-store", "", "the cluster's object store, s3://bucket/prefix?endpoint=host:port (required)")
	name := fs.String("name", "", "the node's name (default: the directory's)")
	listen := fs.String("listen", "127.0.0.1:0", "the address to serve the node's gRPC service on")
	backup := fs.String("backup", "", "back the store up under this name in the object store after every checkpoint; a --dir without a store is restored from it first")
	if err := fs.Parse(args); err != nil {
		return usageError(err)
	}
	if fs.NArg() > 0 {
		return usageError(errors.Newf("unexpected arguments %q", fs.Args()))
	}
	if *dir == "" || *url == "" {
		return usageError(errors.New("--dir and --object-store are required"))
	}
	if *name == "" {
		*name = *dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	err := cluster.Serve(ctx, cluster.ServeConfig{
		Name: *name, Dir: *dir, Listen: *listen, Log: log, Backup: *backup,
		Store: &lsm.Options{Logger: cliLogger{w: stderr}, ObjectStore: objectStoreOptions(*url)},
		Ready: func(addr string) { fmt.Fprintln(stdout, cluster.ReadyLine(addr)) },
	})
	if err != nil {
		return exitError, err
	}
	return exitOK, nil
}
