package keys

import (
	"encoding/binary"
	"hash/crc32"
)

// ieeeSlicing8 are the tables of CRC-32 (IEEE) by eight bytes at a time:
// ieeeSlicing8[0] is the usual byte table, and ieeeSlicing8[k][b] the CRC
// of byte b followed by k zero bytes.
var ieeeSlicing8 = func() *[8][256]uint32 {
	var t [8][256]uint32
	t[0] = *crc32.IEEETable
	for i := range 256 {
		for k := 1; k < 8; k++ {
			prev := t[k-1][i]
			t[k][i] = t[0][prev&0xff] ^ prev>>8
		}
	}
	return &t
}()

// crc32IEEE is crc32.ChecksumIEEE for the short keys a vnode is hashed
// from (an 8-byte id with its header is 9 bytes): the standard library
// goes eight bytes at a time only from 16 bytes on, and a byte at a time
// below, behind a sync.Once; this goes eight at a time from 8 and inlines
// nothing but table lookups. TestVnodeHash holds it to crc32.ChecksumIEEE.
func crc32IEEE(p []byte) uint32 {
	t := ieeeSlicing8
	crc := ^uint32(0)
	for len(p) >= 8 {
		crc ^= binary.LittleEndian.Uint32(p)
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
		p = p[8:]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}
