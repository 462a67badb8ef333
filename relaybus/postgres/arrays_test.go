package postgres

import (
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/internal/dbenv/dbtest"
)

// TestArraysEncodeAsPlainSlices: every array parameter type of
// arrays.go is encoded to the bytes pgx writes for the plain slice it
// replaces (a NULL key as a nil *string, a nil payload as a nil []byte),
// and reads back from the server as it was given; a value out of its
// column's range is refused, as it is for the plain slice.
func TestArraysEncodeAsPlainSlices(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	enc := func(oid uint32, v any) []byte {
		t.Helper()
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		require.NoError(t, err)
		return b
	}
	loc := time.FixedZone("x", 5*3600+30*60)
	times := []time.Time{time.Date(2026, 12, 7, 15, 4, 5, 123456000, time.UTC), time.Date(1999, 1, 2, 3, 4, 5, 6000, loc), {}}
	strs := []string{"a", "", "événement", "with,comma and \"quote\""}
	k := "k"
	ints := []int64{0, 1, 255, 256, -1, math.MaxInt64, math.MinInt64, 1 << 40}

	cases := []struct {
		name  string
		oid   uint32
		plain any
		ours  any
	}{
		{"text", pgtype.TextArrayOID, strs, array[textElem]{"a", "", "événement", "with,comma and \"quote\""}},
		{"text empty", pgtype.TextArrayOID, []string{}, array[textElem]{}},
		{"text nil", pgtype.TextArrayOID, []string(nil), array[textElem](nil)},
		{"keys", pgtype.TextArrayOID, []*string{&k, nil, &k}, array[keyElem]{"k", "", "k"}},
		{"bytea", pgtype.ByteaArrayOID, [][]byte{[]byte("x"), nil, {}, {0, 1, 2}}, array[byteaElem]{[]byte("x"), nil, {}, {0, 1, 2}}},
		{"bigint", pgtype.Int8ArrayOID, ints, func() array[intElem] {
			a := make(array[intElem], len(ints))
			for i, v := range ints {
				a[i] = intElem(v)
			}
			return a
		}()},
		{"timestamptz", pgtype.TimestamptzArrayOID, times, array[timeElem]{timeElem(times[0]), timeElem(times[1]), timeElem(times[2])}},
	}
	for _, c := range cases {
		require.Equal(t, enc(c.oid, c.plain), enc(c.oid, c.ours), c.name)
	}
	// The single-event statement passes pointers into the arrays as scalars.
	key, none := keyElem("k"), keyElem("")
	require.Equal(t, enc(pgtype.TextOID, &k), enc(pgtype.TextOID, &key))
	require.Nil(t, enc(pgtype.TextOID, &none), "an empty key is NULL")
	id := textElem("e1")
	require.Equal(t, enc(pgtype.TextOID, "e1"), enc(pgtype.TextOID, &id))
	payload, nilPayload := byteaElem("p"), byteaElem(nil)
	require.Equal(t, enc(pgtype.ByteaOID, []byte("p")), enc(pgtype.ByteaOID, &payload))
	require.Nil(t, enc(pgtype.ByteaOID, &nilPayload), "a nil payload is NULL")
	at := timeElem(times[1])
	require.Equal(t, enc(pgtype.TimestamptzOID, times[1]), enc(pgtype.TimestamptzOID, &at))

	// A lane or an attempt count out of a smallint's range is an error, not a wrapped value.
	_, err := m.Encode(pgtype.Int2ArrayOID, pgtype.BinaryFormatCode, array[intElem]{1 << 16}, nil)
	require.Error(t, err)

	// Through the server, with the statement described (pgx's default,
	// binary arrays) and with the parameter types unknown to pgx (text,
	// through each type's driver.Valuer): QueryExecModeExec and the
	// simple protocol, which a pool behind PgBouncer uses.
	ctx := t.Context()
	dsn := dbtest.TestDatabase(t)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		cfg, err := pgx.ParseConfig(dsn)
		require.NoError(t, err)
		cfg.DefaultQueryExecMode = mode
		conn, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		var (
			gotStrs  []string
			gotKeys  []*string
			gotBytes [][]byte
			gotInts  []int64
			gotTimes []time.Time
			nullText *[]string
			gotKey   *string
			gotNone  *string
			gotAt    time.Time
			gotNil   []byte
		)
		require.NoError(t, conn.QueryRow(ctx, "SELECT $1::text[], $2::text[], $3::bytea[], $4::bigint[], $5::timestamptz[], $6::text[], $7::text, $8::text, $9::timestamptz, $10::bytea",
			cases[0].ours, cases[3].ours, cases[4].ours, cases[5].ours, cases[6].ours, array[textElem](nil), &key, &none, &at, &nilPayload).
			Scan(&gotStrs, &gotKeys, &gotBytes, &gotInts, &gotTimes, &nullText, &gotKey, &gotNone, &gotAt, &gotNil), mode)
		require.NoError(t, conn.Close(ctx))
		require.Equal(t, strs, gotStrs, mode)
		require.Equal(t, []*string{&k, nil, &k}, gotKeys, mode)
		require.Equal(t, [][]byte{[]byte("x"), nil, {}, {0, 1, 2}}, gotBytes, mode)
		require.Equal(t, ints, gotInts, mode)
		require.Len(t, gotTimes, len(times), mode)
		for i := range times {
			require.True(t, times[i].Equal(gotTimes[i]), "%v: %v != %v", mode, times[i], gotTimes[i])
		}
		require.Nil(t, nullText, "%v: a nil array is NULL", mode)
		require.Equal(t, &k, gotKey, mode)
		require.Nil(t, gotNone, "%v: an empty key is NULL", mode)
		require.True(t, times[1].Equal(gotAt), mode)
		require.Nil(t, gotNil, "%v: a nil payload is NULL", mode)
	}
}
