package keys

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cockroachdb/errors"
)

// ErrInvalidPK marks every error about pk bytes that are not a valid encoding
// under a table's schema.
var ErrInvalidPK = errors.New("lsmstats: invalid pk encoding")

// ColumnType is the type of one primary-key column.
type ColumnType byte

const (
	// Uint64 is an unsigned integer, 8 bytes big-endian.
	Uint64 ColumnType = 'u'
	// Int64 is a signed integer, 8 bytes big-endian with the sign bit flipped
	// so that negative values sort first.
	Int64 ColumnType = 'i'
	// Bytes is a byte string: 0x00 is escaped as 0x00 0xFF and the string ends
	// with 0x00 0x01, so that byte order is string order and no encoding is a
	// prefix of another.
	Bytes ColumnType = 'b'
)

func (t ColumnType) String() string {
	switch t {
	case Uint64:
		return "u64"
	case Int64:
		return "i64"
	case Bytes:
		return "bytes"
	default:
		return fmt.Sprintf("ColumnType(%d)", byte(t))
	}
}

// Schema is the list of a table's pk column types. A pk is the concatenation
// of its columns' encodings; since each encoding is prefix-free and
// memcomparable, so is the tuple.
type Schema []ColumnType

// ParseSchema parses the String form of a schema ("u64,bytes").
func ParseSchema(s string) (Schema, error) {
	if s == "" {
		return nil, errors.New("lsmstats: empty pk schema")
	}
	var out Schema
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(f) {
		case "u64":
			out = append(out, Uint64)
		case "i64":
			out = append(out, Int64)
		case "bytes":
			out = append(out, Bytes)
		default:
			return nil, errors.Newf("lsmstats: unknown pk column type %q in schema %q", f, s)
		}
	}
	return out, nil
}

func (s Schema) String() string {
	parts := make([]string, len(s))
	for i, t := range s {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

// Check reports whether s is a usable schema: at least one column, all of
// known types.
func (s Schema) Check() error {
	if len(s) == 0 {
		return errors.New("lsmstats: pk schema has no columns")
	}
	for i, t := range s {
		switch t {
		case Uint64, Int64, Bytes:
		default:
			return errors.Newf("lsmstats: pk column %d has unknown type %d", i, byte(t))
		}
	}
	return nil
}

// Validate returns nil if pk is exactly one valid encoding of a tuple of s.
func (s Schema) Validate(pk []byte) error {
	rest := pk
	for i, t := range s {
		var err error
		if rest, err = skipColumn(t, rest); err != nil {
			return errors.Wrapf(err, "column %d (%s) of pk %x", i, t, pk)
		}
	}
	if len(rest) != 0 {
		return errors.Wrapf(ErrInvalidPK, "pk %x has %d trailing bytes after %d columns", pk, len(rest), len(s))
	}
	return nil
}

// PrefixLen returns the length of the first n columns of a valid pk (an
// error if pk is not valid that far), without decoding them.
func (s Schema) PrefixLen(pk []byte, n int) (int, error) {
	if n < 0 || n > len(s) {
		return 0, errors.Newf("lsmstats: %d columns of a %d-column schema", n, len(s))
	}
	rest := pk
	for i, t := range s[:n] {
		var err error
		if rest, err = skipColumn(t, rest); err != nil {
			return 0, errors.Wrapf(err, "column %d (%s) of pk %x", i, t, pk)
		}
	}
	return len(pk) - len(rest), nil
}

func skipColumn(t ColumnType, b []byte) ([]byte, error) {
	switch t {
	case Uint64, Int64:
		if len(b) < 8 {
			return nil, errors.Wrapf(ErrInvalidPK, "need 8 bytes, have %d", len(b))
		}
		return b[8:], nil
	case Bytes:
		n, err := bytesLen(b)
		if err != nil {
			return nil, err
		}
		return b[n:], nil
	default:
		return nil, errors.Wrapf(ErrInvalidPK, "unknown column type %d", byte(t))
	}
}

// Decode splits pk into its column values: uint64, int64 or []byte (aliasing
// nothing of pk).
func (s Schema) Decode(pk []byte) ([]any, error) {
	if err := s.Validate(pk); err != nil {
		return nil, err
	}
	out := make([]any, len(s))
	rest := pk
	for i, t := range s {
		switch t {
		case Uint64:
			out[i], rest, _ = DecodeUint64(rest)
		case Int64:
			out[i], rest, _ = DecodeInt64(rest)
		case Bytes:
			out[i], rest, _ = DecodeBytes(rest, nil)
		}
	}
	return out, nil
}

// Encode appends the encoding of vals, which must match s column by column
// (uint64, int64, []byte or string).
func (s Schema) Encode(dst []byte, vals ...any) ([]byte, error) {
	if len(vals) != len(s) {
		return dst, errors.Newf("lsmstats: schema %s has %d columns, got %d values", s, len(s), len(vals))
	}
	for i, t := range s {
		switch v := vals[i].(type) {
		case uint64:
			if t != Uint64 {
				return dst, errors.Newf("lsmstats: column %d is %s, got uint64", i, t)
			}
			dst = AppendUint64(dst, v)
		case int64:
			if t != Int64 {
				return dst, errors.Newf("lsmstats: column %d is %s, got int64", i, t)
			}
			dst = AppendInt64(dst, v)
		case []byte:
			if t != Bytes {
				return dst, errors.Newf("lsmstats: column %d is %s, got []byte", i, t)
			}
			dst = AppendBytes(dst, v)
		case string:
			if t != Bytes {
				return dst, errors.Newf("lsmstats: column %d is %s, got string", i, t)
			}
			dst = AppendBytes(dst, []byte(v))
		default:
			return dst, errors.Newf("lsmstats: column %d: unsupported value type %T", i, v)
		}
	}
	return dst, nil
}

// Format renders pk for humans, e.g. "(42, 'abc')", or its hex if it does not
// decode.
func (s Schema) Format(pk []byte) string {
	vals, err := s.Decode(pk)
	if err != nil {
		return fmt.Sprintf("%x", pk)
	}
	var b strings.Builder
	b.WriteByte('(')
	for i, v := range vals {
		if i > 0 {
			b.WriteString(", ")
		}
		switch v := v.(type) {
		case []byte:
			fmt.Fprintf(&b, "%q", v)
		default:
			fmt.Fprintf(&b, "%d", v)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// AppendUint64 appends the memcomparable encoding of v.
func AppendUint64(dst []byte, v uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, v)
}

// AppendInt64 appends the memcomparable encoding of v.
func AppendInt64(dst []byte, v int64) []byte {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63))
}

// AppendBytes appends the escaped, terminated encoding of v.
func AppendBytes(dst, v []byte) []byte {
	for _, c := range v {
		if c == 0x00 {
			dst = append(dst, 0x00, 0xFF)
		} else {
			dst = append(dst, c)
		}
	}
	return append(dst, 0x00, 0x01)
}

// DecodeUint64 decodes a Uint64 column from the front of b.
func DecodeUint64(b []byte) (uint64, []byte, error) {
	if len(b) < 8 {
		return 0, b, errors.Wrapf(ErrInvalidPK, "u64 column needs 8 bytes, have %d", len(b))
	}
	return binary.BigEndian.Uint64(b), b[8:], nil
}

// DecodeInt64 decodes an Int64 column from the front of b.
func DecodeInt64(b []byte) (int64, []byte, error) {
	u, rest, err := DecodeUint64(b)
	return int64(u ^ (1 << 63)), rest, err
}

// DecodeBytes decodes a Bytes column from the front of b, appending the value
// to dst.
func DecodeBytes(b, dst []byte) ([]byte, []byte, error) {
	n, err := bytesLen(b)
	if err != nil {
		return dst, b, err
	}
	for i := 0; i < n-2; i++ {
		dst = append(dst, b[i])
		if b[i] == 0x00 {
			i++ // skip the 0xFF escape
		}
	}
	return dst, b[n:], nil
}

// bytesLen returns the length of the Bytes encoding at the front of b,
// terminator included.
func bytesLen(b []byte) (int, error) {
	for i := 0; i < len(b); i++ {
		if b[i] != 0x00 {
			continue
		}
		if i+1 == len(b) {
			return 0, errors.Wrapf(ErrInvalidPK, "bytes column ends inside an escape at offset %d", i)
		}
		switch b[i+1] {
		case 0x01:
			return i + 2, nil
		case 0xFF:
			i++
		default:
			return 0, errors.Wrapf(ErrInvalidPK, "bytes column has invalid escape 0x00 0x%02x at offset %d", b[i+1], i)
		}
	}
	return 0, errors.Wrapf(ErrInvalidPK, "bytes column is not terminated")
}
