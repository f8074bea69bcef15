package lsm

import (
	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
)

// Errors returned by the store. Test for them with errors.Is; the messages
// carry the details (table, vnode, epoch, key). Corrupt bytes are not among
// them: every such error is lsmstats.ErrCorruption (lsmstats.IsCorruption),
// and names what is corrupt.
var (
	// ErrClosed is returned by every operation after Close.
	ErrClosed = errors.New("lsmstats: store is closed")
	// ErrFailed is returned by writes after a fault left the store unable to
	// tell what reached the disk; reads keep working. Reopen the store.
	ErrFailed = errors.New("lsmstats: store refuses writes after a failure; reopen it")
	// ErrUnknownTable is a table id missing from the catalog, given to
	// Table, NewWriter, a read (Get, NewIter, a Snapshot's), GC,
	// CompactRange or RecomputeLiveStats.
	ErrUnknownTable = errors.New("lsmstats: unknown table")
	// ErrInvalidVnode is an op on a vnode outside the table's vnode count,
	// outside the writer's vnode set, or not matching the pk's hash.
	ErrInvalidVnode = errors.New("lsmstats: invalid vnode")
	// ErrEpochOrder is an epoch that does not increase: an op on an epoch
	// its writer already sealed ("epoch is sealed"), a seal not above the
	// writer's last sealed epoch, an op or seal while another epoch is open,
	// a commit not above the committed epoch, or an epoch at or below the
	// store's durable high-water mark.
	ErrEpochOrder = errors.New("lsmstats: epoch out of order")
	// ErrNotSealed is a commit of an epoch some writer has not sealed.
	ErrNotSealed = errors.New("lsmstats: epoch not sealed by every writer")
	// ErrInconsistentOp is a checked op that contradicts the current state:
	// an insert of a live pk, a delete or update of an absent one, or an old
	// row that differs from the stored one.
	ErrInconsistentOp = errors.New("lsmstats: op inconsistent with the stored row")
	// ErrEpochUnavailable is a read at an epoch above the committed epoch or
	// below the garbage-collection watermark.
	ErrEpochUnavailable = errors.New("lsmstats: epoch not readable")
	// ErrReadOnly is returned by every write to a store opened with
	// Options.ReadOnly.
	ErrReadOnly = errors.New("lsmstats: store is open read-only")
	// ErrNoStore refuses a path that holds no store, when Options.ReadOnly
	// or Options.MustExist is set.
	ErrNoStore = errors.New("lsmstats: no store")
	// ErrFormatTooNew refuses a store written by a newer format version.
	ErrFormatTooNew = errors.New("lsmstats: store format is newer than this library")
)

var (
	// errEpochSealed is an op on an epoch its writer already sealed: an
	// ErrEpochOrder, with its own message.
	errEpochSealed error = epochSealed{}
	// errCorruptMetadata marks metadata rows that do not decode, and
	// missing ones. It is lsmstats.ErrCorruption: callers test for that.
	errCorruptMetadata = lsmstats.NewCorruptionSentinel("lsmstats: corrupt metadata")
)

// epochSealed is errEpochSealed: errors.Is (the standard library's and
// cockroachdb's) finds ErrEpochOrder in it.
type epochSealed struct{}

func (epochSealed) Error() string        { return "lsmstats: epoch is sealed" }
func (epochSealed) Is(target error) bool { return target == ErrEpochOrder }
