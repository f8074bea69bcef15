package stats_test

import (
	"os"
	"testing"

	"github.com/lsmstats/lsmstats/internal/s3server"
)

// TestMain stops the S3 server that the data-driven files share on their
// object-store runs (storetest.Walk).
func TestMain(m *testing.M) { os.Exit(s3server.RunTests(m)) }
