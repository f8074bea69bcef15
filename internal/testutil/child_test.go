package testutil

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const childModeEnv = "LSMSTATS_TESTUTIL_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childModeEnv) {
	case "done-then-wait": // reports its job done, then is slow to exit
		fmt.Println("D")
		time.Sleep(time.Minute)
		os.Exit(0)
	case "fail":
		ExitChild(fmt.Errorf("broken"))
	}
	os.Exit(m.Run())
}

// TestChildFinished: a child killed by the test after it reported its job
// done has finished; one that failed, or that a SIGKILL the test did not
// send ended, has not.
func TestChildFinished(t *testing.T) {
	c := StartChild(t, os.Stderr, childModeEnv+"=done-then-wait")
	require.Equal(t, Matched, c.ReadUntil(time.Minute, func(l string) bool { return l == "D" }))
	c.Kill(t)
	end := c.Wait()
	require.True(t, end.Killed)
	require.True(t, end.KilledByTest)
	require.NoError(t, end.Finished())

	c = StartChild(t, os.Stderr, childModeEnv+"=fail")
	end = c.Wait()
	require.Equal(t, 3, end.Code)
	require.False(t, end.KilledByTest)
	require.Error(t, end.Finished())

	c = StartChild(t, os.Stderr, childModeEnv+"=done-then-wait")
	require.Equal(t, Matched, c.ReadUntil(time.Minute, func(l string) bool { return l == "D" }))
	require.NoError(t, c.cmd.Process.Kill()) // not through Kill: not the test's kill
	end = c.Wait()
	require.True(t, end.Killed)
	require.False(t, end.KilledByTest)
	require.Error(t, end.Finished())
}
