// Package sstsummary holds what one SST contains of each table and vnode:
// its FileSummary (the counts of MVCC entries, puts, deletes, prefixes and
// Pebble tombstones, and an ordered sample of pk positions with their
// cumulative counts), the Pebble block property collector that builds it
// for every SST Pebble or the store writes (Collector, registered under
// CollectorName), and the payload codec that stores it in the SST's user
// property and reads it back (docs/format.md, "The statistics payload").
// A BatchSummary is the same summary of a batch committed through the
// memtable, until a flush writes it.
//
// The tracker of the live SSTs (internal/ssttracker) sums these summaries
// into the physical statistics that package stats exposes; stats.Counts is
// the public twin of Counts (same fields, so a conversion between them is
// free and fails to compile if they drift apart).
package sstsummary
