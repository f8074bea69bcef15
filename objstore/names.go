package objstore

import (
	"fmt"
	"strconv"
	"strings"
)

// SSTName returns the name Pebble gives, in a remote.Storage, the object of
// the SST that creator made under its file number fileNum (Pebble's
// objstorageprovider names it so; see the package doc):
//
//	HASH-CREATOR-FILENUM.sst
//
// with HASH = uint16(creator*7459 + fileNum*17539) in 4 hex digits and
// FILENUM in 6 digits at least.
func SSTName(creator, fileNum uint64) string {
	return fmt.Sprintf("%04x-%d-%06d.sst", nameHash(creator, fileNum), creator, fileNum)
}

func nameHash(creator, fileNum uint64) uint16 {
	return uint16(creator*7459 + fileNum*17539)
}

// ObjectName is an object name of Pebble's shared storage, parsed
// (ParseName): an SST, or a reference marker on one.
type ObjectName struct {
	// Creator and FileNum name the SST: its creator id and the creator's
	// file number.
	Creator, FileNum uint64
	// Ref says the object is a reference marker on that SST
	// (SSTName(...)+".ref.REFCREATOR.REFFILENUM", empty), made by the
	// store RefCreator for its file RefFileNum.
	Ref                    bool
	RefCreator, RefFileNum uint64
}

// ParseName parses an object name that Pebble's shared storage makes (an
// SST or a reference marker, the names SSTName and ObjectName describe),
// and reports false for any other name, or one whose hash does not match.
func ParseName(name string) (ObjectName, bool) {
	var n ObjectName
	sst, ref, isRef := strings.Cut(name, ".ref.")
	base, ok := strings.CutSuffix(sst, ".sst")
	if !ok {
		return n, false
	}
	parts := strings.Split(base, "-")
	if len(parts) != 3 || len(parts[0]) != 4 || len(parts[2]) < 6 {
		return n, false
	}
	hash, err := strconv.ParseUint(parts[0], 16, 16)
	if err != nil || parts[0] != strings.ToLower(parts[0]) {
		return n, false
	}
	if n.Creator, ok = decimal(parts[1]); !ok {
		return n, false
	}
	if n.FileNum, ok = decimal(parts[2]); !ok {
		return n, false
	}
	if uint16(hash) != nameHash(n.Creator, n.FileNum) {
		return n, false
	}
	if !isRef {
		return n, true
	}
	rc, rf, ok := strings.Cut(ref, ".")
	if !ok || len(rf) < 6 {
		return n, false
	}
	n.Ref = true
	if n.RefCreator, ok = decimal(rc); !ok {
		return n, false
	}
	if n.RefFileNum, ok = decimal(rf); !ok {
		return n, false
	}
	return n, true
}

// decimal parses digits only (no sign, no spaces).
func decimal(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}
