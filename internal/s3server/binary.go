package s3server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cockroachdb/errors"
)

// SeaweedFSModule and SeaweedFSVersion name the SeaweedFS release whose
// `weed` binary the tests run (Apache-2.0). Changing the version changes
// the binary's name in the cache, so that the next `make objstore` builds
// it again.
const (
	SeaweedFSModule  = "github.com/seaweedfs/seaweedfs"
	SeaweedFSVersion = "v0.0.0-20261109003541-7506e5f91cd6"
)

// BinaryEnv names the environment variable that, when set, is the path of
// the weed binary to run instead of the cached one.
const BinaryEnv = "LSMSTATS_WEED"

// BinaryPath returns where the weed binary is: $LSMSTATS_WEED when set,
// else lsmstats/weed-<revision> under the user's cache directory
// ($XDG_CACHE_HOME, else ~/.cache on Linux). It does not check that the
// file exists.
func BinaryPath() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		return p, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", errors.Newf("s3server: no cache directory for the weed binary (set %s to its path): %w", BinaryEnv, err)
	}
	return filepath.Join(dir, "lsmstats", "weed-"+revision()), nil
}

// revision is the commit part of SeaweedFSVersion (its last dash-separated
// field), which names the cached binary.
func revision() string {
	v := SeaweedFSVersion
	if i := strings.LastIndexByte(v, '-'); i >= 0 {
		return v[i+1:]
	}
	return strings.TrimPrefix(v, "v")
}

// missingBinaryError is the error of a test that finds no weed binary.
func missingBinaryError(path string, err error) error {
	return errors.Newf("s3server: the SeaweedFS server binary %s is missing (%v): run `make objstore` to build it "+
		"(once; about 10 minutes on two cores), or set %s to a weed binary", path, err, BinaryEnv)
}

// Build builds the weed binary into BinaryPath unless it is there already,
// writing the go commands it runs and their output to log. It downloads
// the SeaweedFS module with `go mod download`, builds ./weed inside the
// module's directory (copied to a temporary directory first if building in
// place fails), and renames the result into place, so that a build that is
// interrupted leaves no partial binary behind. goBin is the go command
// ("go" when empty).
func Build(ctx context.Context, goBin string, log io.Writer) error {
	if goBin == "" {
		goBin = "go"
	}
	dst, err := BinaryPath()
	if err != nil {
		return err
	}
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		fmt.Fprintf(log, "objstore: %s is there already\n", dst)
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return errors.Newf("s3server: cache directory for the weed binary: %w", err)
	}
	// The go commands run outside this module, so that its go.mod plays no
	// part, and with GOFLAGS cleared, so that a -mod flag of the caller's
	// does not apply to SeaweedFS's module.
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var out bytes.Buffer
	dl := exec.CommandContext(ctx, goBin, "mod", "download", "-json", SeaweedFSModule+"@"+SeaweedFSVersion)
	dl.Dir, dl.Env, dl.Stdout, dl.Stderr = os.TempDir(), env, &out, log
	fmt.Fprintf(log, "objstore: %s\n", strings.Join(dl.Args, " "))
	if err := dl.Run(); err != nil {
		return errors.Newf("s3server: go mod download %s@%s: %w\n%s", SeaweedFSModule, SeaweedFSVersion, err, out.String())
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &mod); err != nil {
		return errors.Newf("s3server: go mod download printed no module: %w\n%s", err, out.String())
	}
	if mod.Error != "" || mod.Dir == "" {
		return errors.Newf("s3server: go mod download %s@%s: %s", SeaweedFSModule, SeaweedFSVersion, mod.Error)
	}

	tmp := fmt.Sprintf("%s.tmp%d", dst, os.Getpid())
	defer os.Remove(tmp)
	build := func(dir string) error {
		cmd := exec.CommandContext(ctx, goBin, "build", "-buildvcs=false", "-o", tmp, "./weed")
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, log, log
		fmt.Fprintf(log, "objstore: (in %s) %s\n", dir, strings.Join(cmd.Args, " "))
		return cmd.Run()
	}
	start := time.Now()
	if err := build(mod.Dir); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The module cache is read-only; a go command that wants to write
		// next to the sources (a go.sum it finds incomplete) fails there.
		fmt.Fprintf(log, "objstore: building in the module cache failed (%v); building a copy\n", err)
		copyDir, err := os.MkdirTemp("", "seaweedfs-src")
		if err != nil {
			return errors.Newf("s3server: %w", err)
		}
		defer os.RemoveAll(copyDir)
		if err := os.CopyFS(copyDir, os.DirFS(mod.Dir)); err != nil {
			return errors.Newf("s3server: copying %s: %w", mod.Dir, err)
		}
		if err := build(copyDir); err != nil {
			return errors.Newf("s3server: go build ./weed in a copy of %s: %w", mod.Dir, err)
		}
	}
	if err := os.Rename(tmp, dst); err != nil {
		return errors.Newf("s3server: %w", err)
	}
	fmt.Fprintf(log, "objstore: built %s in %s\n", dst, time.Since(start).Round(time.Second))
	return nil
}
