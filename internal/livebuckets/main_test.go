package livebuckets

import (
	"flag"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	flag.Parse()
	CheckSharedBuckets(flag.Lookup("test.bench").Value.String() == "")
	os.Exit(m.Run())
}
