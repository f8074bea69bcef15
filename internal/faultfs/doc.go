// Package faultfs is test support for the fault-injection tests of lsm,
// stats and compaction, which run their store on Pebble's errorfs over the
// real file system (vfs.Default over a t.TempDir, so the files survive the
// wrapper and the same directory reopens cleanly), and for the corruption
// tests, which damage the files of a closed store.
//
// It holds what those tests share, and nothing else:
//
//   - Kind names errorfs's operation kinds the way the tests and their logs
//     do (create, open, read, write, sync, ...); IsKind checks a name.
//   - Counts counts injected faults per kind, safe for concurrent use, and
//     renders them as "create=2 write=1 (total 3)" (Format does the same
//     for a plain map). LogAtEnd logs them when a test ends, as the line
//     "faults injected per kind: ...".
//   - Switch is an errorfs.Injector whose inner injector a test replaces
//     as it goes (nil: no faults), counting what the inner one injected.
//   - OpIs is an errorfs predicate on one operation kind.
//   - SSTBlocks lists the blocks of an SST by kind (data, index,
//     properties, footer, ...) with their byte ranges, and Damage flips,
//     zeroes or cuts a byte range of a file: the corruption tests damage a
//     closed store's files with them.
//
// Which operations fail is each test's business: stats and compaction
// compose errorfs's own predicates behind a Switch; lsm has its own
// rule-based injector (paths relative to the store directory, faults that
// Pebble turns into Fatalf kept out of process) and uses Kind and Counts.
package faultfs
