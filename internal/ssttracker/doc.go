// Package ssttracker keeps the physical statistics of the live SSTs of one
// Pebble database: a Tracker follows Pebble's flushes, ingestions and
// compactions through its event listener and publishes, on each change, an
// immutable Version, the sum of the live SSTs' summaries
// (internal/sstsummary) per table and vnode, derived from the previous one
// by the files that came and went (version.go, tracker.go, changes.go).
// Until a flush writes them, checkpoints committed through the memtable
// count by their batch summaries (unflushed.go). For each compaction it
// computes what changed (internal/compactiondelta) from the summaries it
// holds (delta.go).
//
// Package stats wraps a Version in stats.Version, whose methods are the
// read-only queries a user asks; the per-SST files, their rebuilt
// payloads and the physical range counts (CountRange) serve verification,
// the CLI and the tests.
package ssttracker
