package objstore

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// suffixRange accepts the answers that hold an object's last bytes and
// refuses the others, naming the header.
func TestSuffixRange(t *testing.T) {
	for _, c := range []struct {
		h             string
		length, n     int64
		start, size   int64
		wantErrSubstr string
	}{
		{"bytes 90-99/100", 10, 10, 90, 100, ""},
		{"bytes 0-99/100", 100, 500, 0, 100, ""},
		{"bytes 0-0/1", 1, 1, 0, 1, ""},
		{"", 40, 50, 0, 40, ""},                // the whole object, plain
		{"", 60, 50, 0, 0, "no Content-Range"}, // longer than asked: not a suffix
		{"bytes 0-9/100", 10, 10, 0, 0, `Content-Range "bytes 0-9/100"`},
		{"bytes 80-99/100", 20, 10, 0, 0, `"bytes 80-99/100"`},
		{"bytes 90-99/100", 9, 10, 0, 0, "and 9 bytes"},
		{"bytes 90-99/*", 10, 10, 0, 0, `"bytes 90-99/*"`},
		{"bytes=90-99/100", 10, 10, 0, 0, `"bytes=90-99/100"`},
		{"bytes 90-99", 10, 10, 0, 0, `"bytes 90-99"`},
		{"bytes 90-x/100", 10, 10, 0, 0, `"bytes 90-x/100"`},
	} {
		start, size, err := suffixRange(c.h, c.length, c.n)
		if c.wantErrSubstr != "" {
			require.ErrorContains(t, err, c.wantErrSubstr, "%+v", c)
			continue
		}
		require.NoError(t, err, "%+v", c)
		require.Equal(t, c.start, start, "%+v", c)
		require.Equal(t, c.size, size, "%+v", c)
	}
}
