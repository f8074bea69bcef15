// Package keys is the key codec shared by every layer of lsmstats and by
// tools that read stores directly: primary-key encoders, the three shapes of
// Pebble user keys, MVCC versions, store metadata keys, the vnode hash and the
// Pebble comparer that orders them all.
//
// # Key shapes (normative; tools outside this module read stores directly)
//
//	versioned:   table u32 BE | vnode u16 BE | pk | 0x00 | ^version u64 BE | kind u8 | 0x0A
//	bare prefix: table u32 BE | vnode u16 BE | pk | 0x00
//	range bound: table u32 BE [| vnode u16 BE]
//
// kind is KindPut (the value holds the row) or KindDelete (an MVCC tombstone
// with an empty value). The kind lives in the key because Pebble hands block
// property collectors nil values for SET keys: a collector that counts puts
// and deletes can only see keys.
//
// A version is epoch<<16 | spill offset (Hummock's EpochWithGap). Storing its
// complement makes newer versions of one prefix sort first, and the spill
// offset orders the pieces of one epoch that the write buffer spilled apart.
//
// # Why plain byte order is the MVCC order
//
// Every pk encoding here is memcomparable (byte order is key order) and
// prefix-free (no encoded pk is a proper prefix of another of the same
// schema). Then for two keys with different prefixes the first differing byte
// lies inside the prefixes, and for equal prefixes it lies inside the
// suffixes. So bytes.Compare over whole keys equals "compare prefixes, then
// suffixes", which is the contract Pebble's Split imposes. The comparer
// computes the latter explicitly (three byte loads per key more than
// bytes.Compare) so that it stays a total order consistent with Split even for
// bytes that are none of our shapes: a foreign key in the store is reported by
// the store, never able to break Pebble's invariants.
//
// # Split
//
// Split never fails. A key is versioned when it is at least SuffixLen+1 bytes
// long, ends in 0x0A, has 0x00 just before the suffix and a kind of 0 or 1;
// its prefix is then key[:len-SuffixLen], else the whole key is the prefix.
// A 17-byte minimum (the shortest table key) would also do; we accept
// versioned keys from 11 bytes on because Pebble's CheckComparer requires the
// tails of a prefix to split too. No key the store writes is 11..16 bytes long
// and ends in 0x0A, so both rules split every stored key identically.
//
// # Metadata
//
// Table id 0xFFFFFFFF is reserved for the store's own unversioned keys,
// 0xFFFFFFFF | name | 0x00. Every name the store writes is registered in
// meta.go (KnownMetaName), with the package that owns its value; a store
// refuses rows of names it does not know unless the store's minor format
// version is newer than its own (then it opens read-only and ignores
// them).
package keys
