package livebuckets

import (
	"flag"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Every seal of a commit's vnode checks the buckets the batch said it
	// shares with the published vnode (sealedPrefix); not while
	// benchmarking, which measures the seal without the check.
	verifySame = flag.Lookup("test.bench").Value.String() == ""
	os.Exit(m.Run())
}
