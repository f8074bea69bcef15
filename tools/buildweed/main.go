// Command buildweed builds SeaweedFS's weed binary, the S3 server the
// object-store tests start on loopback (internal/s3server), into the user's
// cache directory, outside the repository, unless it is there already. It
// is what `make objstore` runs; the first build takes about 10 minutes on
// two cores, later runs return at once.
//
//	go run ./tools/buildweed [-go GO]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/lsmstats/lsmstats/internal/s3server"
)

func main() {
	goBin := flag.String("go", "go", "the go command that builds the binary")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := s3server.Build(ctx, *goBin, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
