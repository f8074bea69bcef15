package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats/internal/faultfs"
	"github.com/lsmstats/lsmstats/internal/s3server"
	"github.com/lsmstats/lsmstats/internal/testutil"
	"github.com/lsmstats/lsmstats/objstore"
	"github.com/stretchr/testify/require"
)

// TestCorruptionObjectStore is TestCorruption for a store that keeps its
// SSTs in a bucket of a real S3 server (SeaweedFS on loopback): the same
// backfill fixture, built on the object store, then one injection at a
// time into the bucket — a block of an SST's object of every kind flipped,
// zeroed or cut off, or the object deleted — and the same operations on a
// copy of the store's local directory: a read-only open and reads at
// several epochs, `lsmstats stats`, `lsmstats verify` and a resume of the
// backfill. Each outcome is the undamaged store's result or an error
// marked as corruption that names the damaged object (its name in the
// bucket, not only Pebble's file number); verify must find every
// injection. A resume that failed is run again once the object is restored,
// on the same directory: it must finish with an MV equal to its upstream,
// having lost nothing. The bucket is restored to the fixture's objects
// after each injection. It prints the seed (-corruption-seed takes it back)
// and a table of outcomes per block kind and injection.
func TestCorruptionObjectStore(t *testing.T) {
	seed := testutil.Seed(t, "corruption-seed", *corruptionSeed)
	fmt.Fprintf(os.Stderr, "TestCorruptionObjectStore seed: %d\n", seed)
	r := rand.New(rand.NewPCG(seed, 39))
	start := time.Now()
	srv := s3server.Shared(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	obj := newFixtureBucket(t, srv)
	f := buildFixture(t, obj)
	t.Logf("fixture: %d objects, %d damageable targets, built in %s", len(obj.objects), len(f.targets),
		time.Since(start).Round(time.Millisecond))

	byKind, kinds := f.targetsByKind(t, "object:data", "object:index", "object:properties", "object:metaindex",
		"object:footer", objectMissing)

	injections := *objCorruptionInjections
	if injections == 0 {
		injections = 2 * len(kinds)
		if raceEnabled {
			injections = len(kinds)
		}
	}
	res := outcomes{}
	for i := range injections {
		if t.Failed() {
			break
		}
		kind := kinds[i%len(kinds)]
		inj := objInjections[(i/len(kinds))%len(objInjections)]
		tg := byKind[kind][r.IntN(len(byKind[kind]))]
		row := kind
		var off, n int64
		if kind != objectMissing {
			row += " " + string(inj)
			var err error
			off, n, err = faultfs.RandomRange(r, obj.mirrorPath(tg.rel), inj, tg.off, tg.size)
			require.NoError(t, err)
		}
		dir := filepath.Join(t.TempDir(), "store")
		copyDir(t, f.dir, dir)
		what := obj.damage(t, tg, inj, off, n)
		desc := fmt.Sprintf("injection %d (seed %d): %s", i, seed, what)
		bad := func(op, format string, args ...any) {
			t.Errorf("%s: %s: %s", desc, op, fmt.Sprintf(format, args...))
		}
		name := tg.rel
		names := func(msg string) bool { return strings.Contains(msg, name) }
		if kind == objectMissing {
			obj.checkPartialStats(t, f, dir, name, bad)
		}
		verifyBefore := res.count(row, "verify ok")
		resumeErr := f.check(t, dir, desc, row, names, res)
		if res.count(row, "verify ok") > verifyBefore {
			bad("verify", "found nothing wrong with the damaged object %s", name)
		}
		// The failed step resumes once the object is back.
		if resumeErr != nil && !errors.Is(resumeErr, errWrongResult) {
			obj.restoreObject(t, name)
			watchdog(t, desc+": resume after the object's restoration", func() {
				if err := resume(t, dir, obj); err != nil {
					bad("restored", "the resume fails after the object's restoration: %v", err)
					return
				}
				res.add(row, "restored", "ok")
			})
		} else {
			res.add(row, "restored", "not-run")
		}
		obj.restore(t)
		require.NoError(t, os.RemoveAll(filepath.Dir(dir)))
	}
	t.Logf("%d injections in %s; outcomes per target and injection (ok: as the undamaged store; corrupt: an error marked as corruption naming the object; restored: the resume after the object's restoration, when the first failed):\n%s",
		injections, time.Since(start).Round(time.Millisecond),
		res.table("open", "reads", "stats", "verify", "resume", "restored"))
}

var objCorruptionInjections = flag.Int("object-corruption-injections", 0,
	"injections of TestCorruptionObjectStore (0: 18, two rounds over the target kinds; 9 under the race detector, which slows each fivefold)")

// objInjections are the injections in the order TestCorruptionObjectStore
// takes them: two rounds over the target kinds (its default) flip bytes
// and cut the object short.
var objInjections = []faultfs.Injection{faultfs.Flip, faultfs.Truncate, faultfs.Zero}

// objectMissing is the target kind of an SST's object deleted from the
// bucket.
const objectMissing = "object:missing"

// fixtureBucket is the bucket of a corruption fixture on an object store:
// its URL, and the fixture's objects, kept to restore the bucket after
// each injection.
type fixtureBucket struct {
	url    string
	bucket *objstore.Bucket
	// mirror is a directory with a copy of each of the fixture's SST
	// objects, a file of the object's name.
	mirror string
	// objects are the bodies of every object of the fixture, by name.
	objects map[string][]byte
}

func newFixtureBucket(t *testing.T, srv *s3server.Server) *fixtureBucket {
	name := srv.NewBucket(t)
	return &fixtureBucket{
		url:    "s3://" + name + "/fixture?endpoint=" + srv.Endpoint + "&retry-for=5s",
		bucket: prefixBucket(t, srv, name, "fixture/"),
		mirror: t.TempDir(),
	}
}

// storeOptions are the store's object-store options: nil for none (o nil).
func (o *fixtureBucket) storeOptions() *objstore.StoreOptions {
	if o == nil {
		return nil
	}
	return objectStoreOptions(o.url)
}

func (o *fixtureBucket) mirrorPath(name string) string { return filepath.Join(o.mirror, name) }

// snapshot keeps the fixture's objects and returns the targets of their
// damage: each block of each SST's object, and each SST's object as a
// whole (objectMissing).
func (o *fixtureBucket) snapshot(t *testing.T) []target {
	ctx := context.Background()
	names, err := o.bucket.List("", "")
	require.NoError(t, err)
	// In the order of their file numbers, which the fixture's build makes
	// the same in every run (the names start with a hash of the store's
	// random creator id): a seed damages the same SSTs.
	fileNum := func(name string) uint64 {
		p, _ := objstore.ParseName(name)
		return p.FileNum
	}
	slices.SortStableFunc(names, func(a, b string) int { return cmp.Compare(fileNum(a), fileNum(b)) })
	o.objects = map[string][]byte{}
	var out []target
	for _, name := range names {
		rd, size, err := o.bucket.ReadObject(ctx, name)
		require.NoError(t, err)
		body := make([]byte, size)
		if size > 0 {
			require.NoError(t, rd.ReadAt(ctx, body, 0))
		}
		require.NoError(t, rd.Close())
		o.objects[name] = body
		if p, ok := objstore.ParseName(name); !ok || p.Ref {
			continue // the store's marker, Pebble's reference markers
		}
		path := o.mirrorPath(name)
		require.NoError(t, os.WriteFile(path, body, 0o644))
		blocks, err := faultfs.SSTBlocks(path)
		require.NoError(t, err)
		for _, b := range blocks {
			out = append(out, target{kind: "object:" + b.Kind, rel: name, off: b.Offset, size: b.Len})
		}
		out = append(out, target{kind: objectMissing, rel: name, size: size})
	}
	require.NotEmpty(t, out, "no SST object in the bucket: %q", names)
	return out
}

// damage applies inj to [off, off+n) of the object tg.rel (from the
// fixture's copy), or deletes it (objectMissing), and says what it did.
func (o *fixtureBucket) damage(t *testing.T, tg target, inj faultfs.Injection, off, n int64) string {
	if tg.kind == objectMissing {
		require.NoError(t, o.bucket.Delete(tg.rel))
		return fmt.Sprintf("deleted object %s", tg.rel)
	}
	path := filepath.Join(t.TempDir(), tg.rel)
	require.NoError(t, os.WriteFile(path, o.objects[tg.rel], 0o644))
	what, err := faultfs.Damage(path, inj, off, n)
	require.NoError(t, err)
	body, err := os.ReadFile(path)
	require.NoError(t, err)
	o.put(t, tg.rel, body)
	return fmt.Sprintf("%s of object %s (%s)", what, tg.rel, tg.kind)
}

func (o *fixtureBucket) put(t *testing.T, name string, body []byte) {
	w, err := o.bucket.CreateObject(name)
	require.NoError(t, err)
	_, err = w.Write(body)
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

// restoreObject puts the fixture's object name back.
func (o *fixtureBucket) restoreObject(t *testing.T, name string) { o.put(t, name, o.objects[name]) }

// restore makes the bucket hold the fixture's objects again, and nothing
// else.
func (o *fixtureBucket) restore(t *testing.T) {
	names, err := o.bucket.List("", "")
	require.NoError(t, err)
	for _, name := range names {
		if _, ok := o.objects[name]; !ok {
			require.NoError(t, o.bucket.Delete(name))
		}
	}
	keys := make([]string, 0, len(o.objects))
	for name := range o.objects {
		keys = append(keys, name)
	}
	slices.Sort(keys)
	for _, name := range keys {
		o.restoreObject(t, name)
	}
}

// checkPartialStats checks that `lsmstats stats` prints what it can of the
// store in dir, which misses the object name: exit 7 with the error naming
// the object, and either the live statistics of every table with the
// physical ones marked unavailable (the object held rows), or nothing if
// the store cannot open (the object held the store's metadata).
func (o *fixtureBucket) checkPartialStats(t *testing.T, f *fixture, dir, name string, bad func(op, format string, args ...any)) {
	out, stderr, code := f.run("stats", dir, "--json")
	if code != exitCorrupt || !strings.Contains(stderr, name) {
		bad("stats", "exit %d, not 7 with a message naming the missing object: stdout:\n%s\nstderr:\n%s", code, out, stderr)
		return
	}
	if out == "" {
		t.Logf("stats with %s missing: the store does not open (the object holds metadata rows)", name)
		return
	}
	var got, want statsJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		bad("stats", "exit 7 with output that is not its JSON: %v\n%s", err, out)
		return
	}
	require.NoError(t, json.Unmarshal([]byte(f.stats), &want))
	if !strings.Contains(got.PhysicalError, name) {
		bad("stats", "the physical statistics' error does not name the object: %q", got.PhysicalError)
	}
	if len(got.Tables) != len(want.Tables) {
		bad("stats", "%d tables printed, the store has %d", len(got.Tables), len(want.Tables))
		return
	}
	t.Logf("stats with %s missing: %d tables' live statistics printed, the physical ones marked unavailable", name, len(got.Tables))
	for i, tb := range got.Tables {
		w := want.Tables[i]
		if tb.Physical != nil || tb.Live.Rows == nil || *tb.Live.Rows != *w.Live.Rows {
			bad("stats", "table %d: physical %v (want none), live rows %v (want %d)", tb.TableID, tb.Physical, tb.Live.Rows, *w.Live.Rows)
		}
	}
}
