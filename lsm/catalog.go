package lsm

import (
	"encoding/binary"

	"github.com/cockroachdb/errors"
	"github.com/lsmstats/lsmstats"
	"github.com/lsmstats/lsmstats/keys"
)

// TableDef describes a table in the store's catalog.
type TableDef struct {
	// ID is the table id, below keys.MetaTable.
	ID uint32
	// Name is informational.
	Name string
	// VnodeCount is the number of vnodes; 0 means keys.DefaultVnodeCount.
	VnodeCount int
	// PK is the schema of the primary key.
	PK keys.Schema
	// DistKeyColumns is the number of leading pk columns that form the
	// distribution key; 0 means the whole pk. Every op's vnode is checked
	// against crc32(encoded distribution key) % VnodeCount.
	DistKeyColumns int
	// VnodeKeyed tables have a first pk column of type Uint64 that is the
	// vnode itself (RisingWave's backfill state tables: one row per vnode,
	// written by the actor that owns the vnode). DistKeyColumns is ignored.
	VnodeKeyed bool
}

func (d *TableDef) normalize() error {
	if d.ID == keys.MetaTable {
		return errors.Newf("lsmstats: table id %d is reserved for metadata", d.ID)
	}
	if d.VnodeCount == 0 {
		d.VnodeCount = keys.DefaultVnodeCount
	}
	if err := keys.CheckVnodeCount(d.VnodeCount); err != nil {
		return errors.Wrapf(err, "table %d", d.ID)
	}
	if err := d.PK.Check(); err != nil {
		return errors.Wrapf(err, "table %d", d.ID)
	}
	if d.DistKeyColumns < 0 || d.DistKeyColumns > len(d.PK) {
		return errors.Newf("lsmstats: table %d: distribution key of %d columns, pk has %d", d.ID, d.DistKeyColumns, len(d.PK))
	}
	if d.DistKeyColumns == 0 {
		d.DistKeyColumns = len(d.PK)
	}
	if d.VnodeKeyed && d.PK[0] != keys.Uint64 {
		return errors.Newf("lsmstats: table %d is vnode-keyed but its first pk column is %s, not u64", d.ID, d.PK[0])
	}
	return nil
}

// distKey returns the encoded distribution key at the front of a valid pk.
func (d *TableDef) distKey(pk []byte) []byte {
	if d.DistKeyColumns == 0 || d.DistKeyColumns == len(d.PK) {
		return pk
	}
	n, err := d.PK.PrefixLen(pk, d.DistKeyColumns)
	if err != nil {
		return pk // not reached: callers validated pk
	}
	return pk[:n]
}

// VnodeOf returns the vnode of a row with the given (valid) pk. For a
// vnode-keyed table it is the first column, which may be out of range.
func (d *TableDef) VnodeOf(pk []byte) uint16 {
	if d.VnodeKeyed {
		v, _, _ := keys.DecodeUint64(pk)
		return uint16(min(v, uint64(1<<16-1)))
	}
	return keys.Vnode(d.distKey(pk), d.VnodeCount)
}

// checkRow validates a vnode and pk of this table.
func (d *TableDef) checkRow(vnode uint16, pk []byte) error {
	if int(vnode) >= d.VnodeCount {
		return errors.Wrapf(ErrInvalidVnode, "vnode %d of table %d (vnode count %d)", vnode, d.ID, d.VnodeCount)
	}
	if err := d.PK.Validate(pk); err != nil {
		return errors.Wrapf(err, "table %d", d.ID)
	}
	if want := d.VnodeOf(pk); want != vnode {
		return errors.Wrapf(ErrInvalidVnode, "table %d: pk %s belongs to vnode %d, not %d", d.ID, d.PK.Format(pk), want, vnode)
	}
	return nil
}

const catalogEntryVersion = 1

// encodeCatalogEntry encodes the value of a catalog key:
//
//	version u8 (=1) | vnode_count u32 BE | dist_key_columns u16 BE |
//	len u16 BE | pk schema (one byte per column: 'u', 'i', 'b') |
//	len u16 BE | name | flags u8 (bit 0: vnode-keyed)
func encodeCatalogEntry(d *TableDef) []byte {
	b := []byte{catalogEntryVersion}
	b = binary.BigEndian.AppendUint32(b, uint32(d.VnodeCount))
	b = binary.BigEndian.AppendUint16(b, uint16(d.DistKeyColumns))
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.PK)))
	for _, t := range d.PK {
		b = append(b, byte(t))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(d.Name)))
	b = append(b, d.Name...)
	var flags byte
	if d.VnodeKeyed {
		flags |= 1
	}
	return append(b, flags)
}

func decodeCatalogEntry(id uint32, b []byte) (*TableDef, error) {
	bad := func(what string) error {
		return errors.Wrapf(errCorruptMetadata, "catalog entry of table %d: %s (%x)", id, what, b)
	}
	if len(b) < 9 || b[0] != catalogEntryVersion {
		return nil, bad("unknown version or truncated")
	}
	d := &TableDef{ID: id, VnodeCount: int(binary.BigEndian.Uint32(b[1:])), DistKeyColumns: int(binary.BigEndian.Uint16(b[5:]))}
	n := int(binary.BigEndian.Uint16(b[7:]))
	b2 := b[9:]
	if len(b2) < n+2 {
		return nil, bad("truncated schema")
	}
	for _, c := range b2[:n] {
		d.PK = append(d.PK, keys.ColumnType(c))
	}
	b2 = b2[n:]
	m := int(binary.BigEndian.Uint16(b2))
	if len(b2) != m+3 {
		return nil, bad("truncated name or flags")
	}
	d.Name = string(b2[2 : 2+m])
	switch b2[2+m] {
	case 0:
	case 1:
		d.VnodeKeyed = true
	default:
		return nil, bad("unknown flags")
	}
	if err := d.normalize(); err != nil {
		return nil, errors.Mark(lsmstats.MarkCorruption(errors.Wrapf(err, "catalog entry of table %d", id)), errCorruptMetadata)
	}
	return d, nil
}

func sameDef(a, b *TableDef) bool {
	if a.ID != b.ID || a.Name != b.Name || a.VnodeCount != b.VnodeCount || a.DistKeyColumns != b.DistKeyColumns ||
		a.VnodeKeyed != b.VnodeKeyed || len(a.PK) != len(b.PK) {
		return false
	}
	for i := range a.PK {
		if a.PK[i] != b.PK[i] {
			return false
		}
	}
	return true
}
