package genjob_test

import (
	"testing"

	"github.com/lsmstats/lsmstats/internal/s3server"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them, and
// stops the S3 server the object-store test starts.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(s3server.TestingM(m))
}
