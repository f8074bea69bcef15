package lsm

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
		crashChild(dir, seed) // runs until killed
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// crashForTest abandons a store as a crash would: the staging directory and
// every buffer stay behind. Pebble is closed (its memtable is always empty:
// all data arrives by ingestion) so that the directory can be reopened in
// this process.
func crashForTest(s *Store) {
	s.iters.close()
	_ = s.tracker.Close()
	_ = s.db.Close()
}

// quietLogger drops Pebble's informational lines.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any) {}
func (quietLogger) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}
func (quietLogger) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(4)
}
