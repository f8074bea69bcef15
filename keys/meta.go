package keys

import "strings"

// The metadata rows of a store (table MetaTable, MetaKey(name)): every name
// the store writes is registered here, with the package that owns its
// value. docs/format.md, "The metadata table", gives their values.
const (
	// FormatVersionName holds the store's format version (u64 BE): a
	// reader refuses a store of a newer one.
	FormatVersionName = "format_version"
	// FormatMinorName holds the store's minor format version (u64 BE;
	// absent means 0). Minor versions only add metadata rows and trailing
	// value fields that older readers may ignore: a reader of an older
	// minor version opens the store read-only, keeping and ignoring the
	// rows it does not know.
	FormatMinorName = "format_minor"
	// CommittedEpochName holds the committed epoch (u64 BE; lsm).
	CommittedEpochName = "committed_epoch"
	// EpochHWMName holds the epoch high-water mark (u64 BE; lsm).
	EpochHWMName = "epoch_hwm"
	// GCEpochName holds the GC watermark (u64 BE; lsm).
	GCEpochName = "gc_epoch"
	// CatalogPrefix starts the catalog entries, table/<id u32 BE> (lsm).
	CatalogPrefix = "table/"
	// LivePrefix starts the live-statistics buckets, live/<table u32
	// BE><vnode u16 BE>... (stats).
	LivePrefix = "live/"
	// LiveEstimatesPrefix starts the estimates markers of the live
	// statistics, live_est/<table u32 BE> (stats).
	LiveEstimatesPrefix = "live_est/"
	// LiveLogPrefix starts the delta log of the live statistics,
	// live_log/<epoch u64 BE>: what a commit changed in the counts of the
	// buckets whose rows it did not rewrite (stats).
	LiveLogPrefix = "live_log/"
)

// metaNames are the registered names; those ending in '/' are prefixes.
var metaNames = []string{
	FormatVersionName, FormatMinorName, CommittedEpochName, EpochHWMName, GCEpochName,
	CatalogPrefix, LivePrefix, LiveEstimatesPrefix, LiveLogPrefix,
}

// KnownMetaName reports whether name is a registered metadata name, or
// starts with a registered prefix.
func KnownMetaName(name []byte) bool {
	for _, n := range metaNames {
		if strings.HasSuffix(n, "/") {
			if len(name) > len(n) && string(name[:len(n)]) == n {
				return true
			}
		} else if string(name) == n {
			return true
		}
	}
	return false
}
