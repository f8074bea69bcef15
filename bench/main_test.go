package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/lsmstats/lsmstats/internal/s3server"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. A
// process started as a solo child (solo_test.go) runs that and nothing
// else. Under -short, the size flags the command line leaves unset take
// their smokeSizes.
func TestMain(m *testing.M) {
	if spec := os.Getenv(soloEnv); spec != "" {
		os.Exit(soloChild(spec))
	}
	flag.Parse()
	if testing.Short() {
		if err := setSmokeSizes(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	// BenchmarkObjectStore's S3 server is shared, stopped at the end.
	goleak.VerifyTestMain(s3server.TestingM(m))
}

// smokeSizes are the sizes of the package's benchmarks under -short (make
// bench-smoke runs every benchmark once with it, to show that each runs):
// each job seconds long instead of minutes. BenchmarkAccuracyMatrix runs
// one cell per pk shape then (reducedMatrix).
var smokeSizes = map[string]string{
	"bench-rows":         "10000",
	"eta-rows":           "12000",
	"eta-limit":          "4000",
	"eta-unlimited-rows": "120000",
	"multi-rows":         "20000,2000,500",
	"snapshot-rows":      "20000,2000,500",
	"scale-rows":         "20k",
	"objstore-rows":      "10000",
}

// setSmokeSizes sets the flags of smokeSizes that the command line did not
// set.
func setSmokeSizes() error {
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range smokeSizes {
		if set[name] {
			continue
		}
		if err := flag.Set(name, v); err != nil {
			return fmt.Errorf("bench: -short size -%s=%s: %w", name, v, err)
		}
	}
	return nil
}
