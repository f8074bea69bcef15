package faultfs

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// kinds groups errorfs's operation kinds under the names the tests and the
// counts use. Kinds not listed (lock, close, disk usage) are "op<N>".
var kinds = map[string][]errorfs.OpKind{
	"create": {errorfs.OpCreate, errorfs.OpReuseForWrite},
	"link":   {errorfs.OpLink},
	"open":   {errorfs.OpOpen, errorfs.OpOpenDir},
	"remove": {errorfs.OpRemove, errorfs.OpRemoveAll},
	"rename": {errorfs.OpRename},
	"mkdir":  {errorfs.OpMkdirAll},
	"list":   {errorfs.OpList},
	"stat":   {errorfs.OpStat, errorfs.OpFileStat},
	"read":   {errorfs.OpFileRead, errorfs.OpFileReadAt},
	"write":  {errorfs.OpFileWrite, errorfs.OpFileWriteAt, errorfs.OpFilePreallocate},
	"sync":   {errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo, errorfs.OpFileFlush},
}

// Kind returns the name of an operation kind.
func Kind(k errorfs.OpKind) string {
	for name, ks := range kinds {
		if slices.Contains(ks, k) {
			return name
		}
	}
	return fmt.Sprintf("op%d", int(k))
}

// IsKind reports whether name is one of the names Kind returns for a known
// kind.
func IsKind(name string) bool {
	_, ok := kinds[name]
	return ok
}

// OpIs is an errorfs predicate on the kind of operation.
type OpIs errorfs.OpKind

func (o OpIs) String() string              { return Kind(errorfs.OpKind(o)) }
func (o OpIs) Evaluate(op errorfs.Op) bool { return op.Kind == errorfs.OpKind(o) }

// Counts counts injected faults per kind. The zero value is ready to use.
type Counts struct {
	mu sync.Mutex
	m  map[string]int
}

// Add counts one fault of a kind.
func (c *Counts) Add(kind string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int{}
	}
	c.m[kind]++
}

// Total returns the number of faults counted.
func (c *Counts) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.m {
		n += v
	}
	return n
}

// Summary renders the counts as Format does.
func (c *Counts) Summary() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Format(c.m)
}

// LogAtEnd logs the counts when t ends: "faults injected per kind: ...",
// reported at LogAtEnd's caller.
func (c *Counts) LogAtEnd(t testing.TB) {
	t.Helper()
	t.Cleanup(func() {
		t.Helper()
		t.Logf("faults injected per kind: %s", c.Summary())
	})
}

// Format renders counts per kind sorted by kind, then their total:
// "create=2 write=1 (total 3)".
func Format(m map[string]int) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	total := 0
	for _, k := range names {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
		total += m[k]
	}
	fmt.Fprintf(&b, "(total %d)", total)
	return b.String()
}

// Switch is an errorfs.Injector that asks the injector a test set last
// (none: no faults) and counts, per kind, the faults it injected. The zero
// value injects nothing.
type Switch struct {
	mu  sync.Mutex
	inj errorfs.Injector
	// Counts are the faults injected so far.
	Counts Counts
}

var _ errorfs.Injector = (*Switch)(nil)

// Set replaces the injector; nil disarms the switch.
func (s *Switch) Set(inj errorfs.Injector) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inj = inj
}

// String implements errorfs.Injector.
func (s *Switch) String() string { return "faultfs switch" }

// MaybeError implements errorfs.Injector.
func (s *Switch) MaybeError(op errorfs.Op) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inj == nil {
		return nil
	}
	err := s.inj.MaybeError(op)
	if err != nil {
		s.Counts.Add(Kind(op.Kind))
	}
	return err
}
