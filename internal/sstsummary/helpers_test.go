package sstsummary

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/keys"
	"github.com/stretchr/testify/require"
)

// The randomized tests accept -seed. Another file of this package may
// register the flag first; then it is shared.
var _ = func() bool {
	if flag.Lookup("seed") == nil {
		flag.Uint64("seed", 0, "seed for randomized tests (0 = time based)")
	}
	return true
}()

func physRand(t testing.TB) *rand.Rand {
	var seed uint64
	if f := flag.Lookup("seed"); f != nil {
		seed, _ = strconv.ParseUint(f.Value.String(), 10, 64)
	}
	seed = testutil.Seed(t, "seed", seed)
	return rand.New(rand.NewPCG(seed, seed^0x5DEECE66D))
}

// physLogger is a pebble.Logger that keeps every line.
type physLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *physLogger) Infof(format string, args ...interface{}) {
	l.add("I " + fmt.Sprintf(format, args...))
}

func (l *physLogger) Errorf(format string, args ...interface{}) {
	l.add("E " + fmt.Sprintf(format, args...))
}

func (l *physLogger) Fatalf(format string, args ...interface{}) {
	panic(fmt.Sprintf(format, args...))
}

func (l *physLogger) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

// errors returns (and clears) the error lines that mention lsmstats.
func (l *physLogger) statsErrors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range l.lines {
		if strings.HasPrefix(s, "E lsmstats/stats") {
			out = append(out, s)
		}
	}
	l.lines = nil
	return out
}

// physOp is one key written by a test.
type physOp struct {
	key  []byte
	kind pebble.InternalKeyKind
	val  []byte
}

func physKey(table uint32, vnode uint16, pk uint64, epoch uint64, kind byte) []byte {
	return keys.AppendVersioned(nil, table, vnode, keys.AppendUint64(nil, pk), keys.MakeVersion(epoch, 0), kind)
}

func physPK(pk uint64) []byte { return keys.AppendUint64(nil, pk) }

func physValue(n int) []byte { return bytes.Repeat([]byte{'v'}, n) }

// parseOps parses datadriven lines:
//
//	put t v pk epoch       MVCC put (Pebble SET)
//	del t v pk epoch       MVCC delete (Pebble SET, empty value)
//	gcdel t v pk epoch [del]  Pebble SINGLEDEL of the put (or delete) version
//	pdel t v pk epoch      Pebble DEL of the put version
//	meta name              metadata key (Pebble SET)
//	foreign hex            a key of no shape (Pebble SET)
//	merge t v pk epoch     Pebble MERGE of a put version (foreign)
func physParseOps(t testing.TB, input string) []physOp {
	var ops []physOp
	for _, line := range strings.Split(input, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		num := func(i int) uint64 {
			require.Greater(t, len(f), i, "line %q", line)
			n, err := strconv.ParseUint(f[i], 10, 64)
			require.NoError(t, err, "line %q", line)
			return n
		}
		switch f[0] {
		case "put", "del", "gcdel", "pdel", "merge":
			kind := keys.KindPut
			if f[0] == "del" || (f[0] == "gcdel" && len(f) > 5 && f[5] == "del") {
				kind = keys.KindDelete
			}
			k := physKey(uint32(num(1)), uint16(num(2)), num(3), num(4), kind)
			op := physOp{key: k, kind: pebble.InternalKeyKindSet}
			switch f[0] {
			case "put":
				op.val = physValue(100)
			case "gcdel":
				op.kind = pebble.InternalKeyKindSingleDelete
			case "pdel":
				op.kind = pebble.InternalKeyKindDelete
			case "merge":
				op.kind = pebble.InternalKeyKindMerge
				op.val = []byte("m")
			}
			ops = append(ops, op)
		case "meta":
			ops = append(ops, physOp{key: keys.MetaKey([]byte(f[1])), kind: pebble.InternalKeyKindSet, val: []byte("x")})
		case "foreign":
			k, err := strconv.Unquote(`"` + f[1] + `"`)
			require.NoError(t, err)
			ops = append(ops, physOp{key: []byte(k), kind: pebble.InternalKeyKindSet, val: []byte("f")})
		default:
			t.Fatalf("unknown op %q", line)
		}
	}
	return ops
}
