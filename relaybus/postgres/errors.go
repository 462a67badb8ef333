package postgres

import "errors"

// ErrNotSetUp is wrapped by the error of a call that found the store's
// tables or schema missing, or without a column this version uses
// (SQLSTATE 42P01, 3F000 or 42703): the schema was never set up in this
// database, or was set up under another Options.Schema or
// Options.TablePrefix, or is 0.1.0 and not upgraded yet. Call Setup (or
// apply SchemaSQL) first; Setup refuses, with ErrUnknownSchema, a schema
// it cannot upgrade. The PostgreSQL error stays in the chain.
var ErrNotSetUp = errors.New("relaybus/postgres: the relaybus schema is not set up here: call Store.Setup (or apply SchemaSQL) before using the store")

// notSetUp reports whether code is a SQLSTATE that one of this store's
// statements gets only when its schema is missing or older than this
// version: the statements name no other table, schema or column.
func notSetUp(code string) bool {
	switch code {
	case "42P01", // undefined_table
		"3F000", // invalid_schema_name
		"42703": // undefined_column
		return true
	}
	return false
}
