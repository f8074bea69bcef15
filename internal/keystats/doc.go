// Package keystats maintains the statistics that package stats exposes:
// the block property collector that writes each SST's summary, the payload
// codec, the tracker that keeps a Version of the live SSTs' summaries, the
// live statistics with their bucket batches, splits and metadata rows, and
// compaction deltas. Package lsm drives it on every commit, flush,
// compaction and open; users read its results through package stats, whose
// package documentation describes the design of both.
package keystats
