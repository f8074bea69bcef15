package bench

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them. A
// process started as a solo child (solo_test.go) runs that and nothing
// else.
func TestMain(m *testing.M) {
	if spec := os.Getenv(soloEnv); spec != "" {
		os.Exit(soloChild(spec))
	}
	goleak.VerifyTestMain(m)
}
