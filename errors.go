package lsmstats

import (
	"github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/v2"
)

// ErrCorruption marks every error about stored bytes that are not what was
// written. Test for it with IsCorruption (which also recognises Pebble's
// marker) or errors.Is.
var ErrCorruption = errors.New("lsmstats: corruption")

// IsCorruption reports whether err carries ErrCorruption or Pebble's
// corruption marker (pebble.ErrCorruption: checksum failures in SST blocks,
// the MANIFEST or the WAL).
func IsCorruption(err error) bool {
	return err != nil && (errors.Is(err, ErrCorruption) || pebble.IsCorruptionError(err))
}

// MarkCorruption returns err marked with ErrCorruption (nil for nil), so
// that errors.Is(err, ErrCorruption) holds; an error already marked is
// returned as it is. Pebble's corruption errors keep Pebble's marker too.
func MarkCorruption(err error) error {
	if err == nil || errors.Is(err, ErrCorruption) {
		return err
	}
	return errors.Mark(err, ErrCorruption)
}

// Corruptionf returns a new error marked with ErrCorruption.
func Corruptionf(format string, args ...any) error {
	return errors.Mark(errors.NewWithDepthf(1, format, args...), ErrCorruption)
}

// NewCorruptionSentinel returns a sentinel error with the message msg that
// is also ErrCorruption: errors.Is(err, sentinel) and
// errors.Is(err, ErrCorruption) both hold for every err that wraps it
// (errors.Wrapf(sentinel, ...)), while sentinels made by two calls stay
// distinct from each other.
//
// errors.Mark(err, sentinel) records the sentinel's identity only, not
// what the sentinel is: mark with MarkCorruption as well where a sentinel
// is used as a mark rather than wrapped.
func NewCorruptionSentinel(msg string) error {
	return &corruptionSentinel{msg: msg}
}

// corruptionSentinel is a sentinel that errors.Is also matches against
// ErrCorruption (through its Is method, which both the standard library's
// and cockroachdb/errors' Is consult).
type corruptionSentinel struct{ msg string }

func (e *corruptionSentinel) Error() string { return e.msg }

// Is reports whether target is ErrCorruption.
func (e *corruptionSentinel) Is(target error) bool { return target == ErrCorruption }
