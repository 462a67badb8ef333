package postgres

import (
	"database/sql/driver"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Array parameters that pgx encodes without an allocation per element.
//
// pgx encodes a []string, []int64 or []time.Time parameter through
// pgtype.FlatArray, whose Index returns each element as an interface
// value: a string, a time.Time or an int64 above 255 is copied to the
// heap for it, and a time.Time is wrapped once more on its way to the
// timestamptz codec. A []*string or [][]byte goes through reflection and
// allocates as much. These run for every event published and every
// delivery completed.
//
// array's Index hands pgx a pointer into the slice instead (a pointer
// in an interface is not copied), and each element type implements the
// pgtype valuer its codec takes (TextValuer, BytesValuer, Int64Valuer,
// TimestamptzValuer), which returns the value without boxing it. The
// wire format is the one pgx writes for the plain slices: binary
// arrays, one dimension, lower bound 1; a nil array is NULL, as a nil
// slice is. jsonb arrays are not covered: pgx's jsonb codec takes no
// valuer that avoids the copy.
//
// Where pgx does not know a parameter's type (QueryExecModeExec, the
// simple protocol: a pool behind PgBouncer), it finds no codec for these
// types and falls back to driver.Valuer, last of its plans: there each
// converts back to the plain value, at the plain value's cost.
type array[E element] []E

// element is an element type of array.
type element interface {
	textElem | keyElem | byteaElem | intElem | timeElem
}

// Dimensions implements pgtype.ArrayGetter.
func (a array[E]) Dimensions() []pgtype.ArrayDimension {
	if a == nil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a)), LowerBound: 1}}
}

// Index implements pgtype.ArrayGetter.
func (a array[E]) Index(i int) any { return &a[i] }

// IndexType implements pgtype.ArrayGetter.
func (a array[E]) IndexType() any { return new(E) }

// Value is the plain slice, for a parameter of unknown type.
func (a array[E]) Value() (driver.Value, error) {
	if a == nil {
		return nil, nil
	}
	switch a := any(a).(type) {
	case array[textElem]:
		return plainSlice(a, func(e textElem) string { return string(e) }), nil
	case array[keyElem]:
		return plainSlice(a, func(e keyElem) *string {
			if e == "" {
				return nil
			}
			s := string(e)
			return &s
		}), nil
	case array[byteaElem]:
		return plainSlice(a, func(e byteaElem) []byte { return e }), nil
	case array[intElem]:
		return plainSlice(a, func(e intElem) int64 { return int64(e) }), nil
	case array[timeElem]:
		return plainSlice(a, func(e timeElem) time.Time { return time.Time(e) }), nil
	}
	panic("unreachable: element constrains E")
}

// plainSlice converts a, element by element, to the plain slice it
// stands for.
func plainSlice[E, T any](a []E, conv func(E) T) []T {
	out := make([]T, len(a))
	for i, e := range a {
		out[i] = conv(e)
	}
	return out
}

// textElem is a text element, never NULL.
type textElem string

func (e *textElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: true}, nil
}

// keyElem is a text element that is NULL when empty: an event's key.
type keyElem string

func (e *keyElem) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*e), Valid: *e != ""}, nil
}

// byteaElem is a bytea element, NULL when nil (as a nil []byte is).
type byteaElem []byte

func (e *byteaElem) BytesValue() ([]byte, error) { return *e, nil }

// Value is the plain value, for a parameter of unknown type.
func (e *byteaElem) Value() (driver.Value, error) {
	if *e == nil {
		return nil, nil
	}
	return []byte(*e), nil
}

// intElem is an integer element of any width (smallint, int, bigint):
// the codec checks that the value fits its column's type.
type intElem int64

func (e *intElem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*e), Valid: true}, nil
}

// timeElem is a timestamptz element.
type timeElem time.Time

func (e *timeElem) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*e), Valid: true}, nil
}

// Value is the plain value, for a parameter of unknown type.
func (e *timeElem) Value() (driver.Value, error) { return time.Time(*e), nil }
