// Package admincli is the relaybus admin command (cmd/relaybus): the
// statistics of a store, its dead letters, requeue, purge and the schema
// SQL, against a PostgreSQL store named by a DSN. cmd/relaybus only calls
// Main; everything else is here, as a function of the arguments, the
// environment and the streams, so that the whole CLI is tested against a
// real database.
//
// It works through the library's own API: a relaybus.Bus on a
// relaybus/postgres store (Statistics, StoreHealth, ListDeliveries,
// Requeue, PurgeExpired, PauseHandler, ResumeHandler, PausedHandlers) and the store's SchemaSQL. It sends no SQL of its own.
// MongoDB stores are not wired in yet: a mongodb:// DSN is refused and
// says so.
//
// # Commands
//
//	relaybus stats                            deliveries per status and handler
//	relaybus dead list [--handler H] ...      dead letters with their last error, a page at a time
//	relaybus dead show ID                     one dead letter in full
//	relaybus requeue ID...                    make the dead letters named pending again
//	relaybus requeue --all | --handler H ...  every dead letter, or a filter's (asks first)
//	relaybus purge --dead 30d --completed 7d  delete what is past its retention (asks first)
//	relaybus health                           the store's upkeep against thresholds (exit 5 on a warning)
//	relaybus pause [--reason R] HANDLER       stop every dispatcher claiming a handler's deliveries
//	relaybus resume HANDLER                   claim them again
//	relaybus paused                           the paused handlers
//	relaybus schema                           the schema SQL, for a migration tool
//	relaybus version
//
// Every command has --help; the database commands take --dsn (or
// RELAYBUS_DATABASE_URL), --schema, --table-prefix, --json and
// --timeout.
//
// # Confirmation
//
// A bulk requeue and a purge ask first: they go on only with --yes, or
// when "yes" is typed at the prompt (on stderr) with stdin a terminal.
// Anything else, a non-terminal stdin included, refuses with exit status
// 3 and changes nothing.
//
// # Exit status
//
//	0  done
//	1  failed: the database or the store returned an error
//	2  usage: a bad command, flag or argument (nothing was done)
//	3  refused: a confirmation was not given (nothing was changed)
//	4  not found: a delivery named does not exist, or is not a dead letter;
//	   resume: the handler is not paused
//	5  unhealthy: relaybus health found a check past its threshold
package admincli
