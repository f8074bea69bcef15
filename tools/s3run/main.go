// Command s3run runs a command beside an S3 server of its own: SeaweedFS
// on loopback (internal/s3server; `make objstore` builds it), with a
// bucket, stopped and removed when the command ends. make demo-s3 runs the
// demo's backfill on it.
//
//	s3run COMMAND [ARG...]
//
// In the arguments, {bucket} and {endpoint} stand for the server's bucket
// and endpoint (http://127.0.0.1:PORT); the command gets the server's
// credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. The exit
// status is the command's.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lsmstats/lsmstats/internal/s3server"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: s3run COMMAND [ARG...] ({bucket} and {endpoint} in the arguments name the server's)")
		return 2
	}
	start := time.Now()
	srv, err := s3server.Launch()
	if err != nil {
		fmt.Fprintln(os.Stderr, "s3run:", err)
		return 1
	}
	defer func() {
		if err := srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "s3run:", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "s3run: S3 server at %s (bucket %s) up in %s\n", srv.Endpoint, srv.Bucket, time.Since(start).Round(time.Millisecond))
	r := strings.NewReplacer("{bucket}", srv.Bucket, "{endpoint}", srv.Endpoint)
	for i := range args {
		args[i] = r.Replace(args[i])
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
	// Ctrl-C reaches the command too (same terminal process group): wait
	// for it to stop, then stop the server.
	signal.Ignore(syscall.SIGINT)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintln(os.Stderr, "s3run:", err)
		return 1
	}
}
