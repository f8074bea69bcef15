// Package lsmstats holds what every package of the module shares and that
// belongs to none of them: the single corruption marker.
//
// # Corruption
//
// Every error that says stored bytes are not what was written — a checksum
// that fails, metadata or a payload that does not decode, a file shorter
// than its metadata says — carries ErrCorruption, as Pebble's do carry
// pebble.ErrCorruption. Test for it with IsCorruption, which recognises
// both markers, or with errors.Is(err, ErrCorruption) for the module's own.
//
// The packages' corruption sentinels (the store's for metadata rows, the
// statistics' for payloads and live-statistics rows, backfill.ErrCorruptMeta,
// ...) are made with NewCorruptionSentinel: an error wrapping one of them is
// both errors.Is(err, thatSentinel) and errors.Is(err, ErrCorruption), with
// no marking at each site that wraps it. Only ErrCorruption is the
// contract: packages lsm and stats export no sentinel of their own for it. Errors that are not built on a
// sentinel are marked with MarkCorruption, and the store marks Pebble's
// corruption errors that cross its API the same way.
//
// The marker lives here, at the root of the module, rather than in package
// keys: it has no key in it, every package already imports keys or a
// package above it, and this package imports nothing of the module, so any
// package (and tools outside the module) can use it without an import
// cycle.
package lsmstats
