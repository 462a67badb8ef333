package mongo

import (
	"context"
	"errors"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// errPrefix starts every error of this package.
const errPrefix = "relaybus/mongo: "

// invalidf returns an error that wraps relaytype.ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf(errPrefix+format+": %w", append(args, relaytype.ErrInvalid)...)
}

// errorFrom turns a driver error into this package's error: the text says
// what the store was doing, the driver error stays in the chain (so
// errors.As finds mongo.ServerError and its labels), and the conditions
// relaybus has sentinels for wrap those sentinels too:
//
//   - mongo.ErrNoDocuments -> relaytype.ErrNotFound
//   - mongo.ErrClientDisconnected -> relaytype.ErrClosed
//
// Every error is wrapped, context errors too: errors.Is(err,
// context.Canceled) still holds, and the driver reports its own timeouts
// (server selection) as context.DeadlineExceeded, which must not lose the
// word on what the store was doing.
func errorFrom(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return fmt.Errorf("%s%s: %w: %w", errPrefix, op, relaytype.ErrNotFound, err)
	case errors.Is(err, mongo.ErrClientDisconnected):
		return fmt.Errorf("%s%s: %w: %w", errPrefix, op, relaytype.ErrClosed, err)
	}
	return fmt.Errorf("%s%s: %w", errPrefix, op, err)
}

// TransientTransactionError reports whether err carries MongoDB's
// TransientTransactionError label: the transaction was aborted (most often
// a write conflict, e.g. two transactions publishing to the same ordering
// key) and running the whole transaction again may succeed. A caller that
// publishes with PublishTx in a transaction of its own should retry on it;
// EventPublish and the bus-owned Publish path retry by themselves.
func TransientTransactionError(err error) bool {
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel(labelTransientTransaction)
}

// labelTransientTransaction is the server's label for a transaction that
// can be retried as a whole.
const labelTransientTransaction = "TransientTransactionError"

// Server error codes and labels the store tells apart. Each is named in
// MongoDB's error code list (src/mongo/base/error_codes.yml).
const (
	codeWriteConflict     = 112   // two writers of one document; in a transaction, labelled TransientTransactionError
	codeIndexNotFound     = 27    // dropIndexes of an index that does not exist
	codeNamespaceNotFound = 26    // an operation on a collection that does not exist
	codeDuplicateKey      = 11000 // a unique index refused a document

	// labelUnknownCommitResult: the commit may or may not have been
	// applied (the connection broke, the write concern timed out);
	// committing again is safe and tells.
	labelUnknownCommitResult = "UnknownTransactionCommitResult"
)

// hasCode reports whether err, or a write error in it, carries code.
func hasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}

// hasLabel reports whether err carries the server's or the driver's label.
func hasLabel(err error, label string) bool {
	var le mongo.LabeledError
	return errors.As(err, &le) && le.HasErrorLabel(label)
}

// writeConflict reports a write conflict (code 112), in or out of a
// transaction.
func writeConflict(err error) bool { return hasCode(err, codeWriteConflict) }

// indexNotFound reports that an index to drop does not exist (or its
// collection does not): for Setup's upgrade, the index is already gone.
func indexNotFound(err error) bool {
	return hasCode(err, codeIndexNotFound) || hasCode(err, codeNamespaceNotFound)
}

// txAction is what runTx does after an error.
type txAction int

const (
	// txFail: return the error.
	txFail txAction = iota
	// txRetry: the transaction was aborted and may succeed when run again
	// from the start (TransientTransactionError: a write conflict with
	// another transaction or write, a primary that stepped down).
	txRetry
	// txRetryCommit: the commit's outcome is unknown; commit again (the
	// server answers a repeated commit of a committed transaction with
	// success).
	txRetryCommit
)

// txDecision decides what runTx does with err from the transaction's
// body (commit false) or from its commit (commit true), on attempt
// number attempt (1 = first) of that step. The bounds are
// MaxTransactionAttempts and MaxCommitAttempts; a context error always
// fails (the caller gave up). A write conflict without the label does
// not happen inside a transaction (the server labels it), and is not
// retried here: the label, not the code, is MongoDB's retry contract.
func txDecision(err error, commit bool, attempt int) txAction {
	switch {
	case err == nil:
		return txFail
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return txFail
	case commit && hasLabel(err, labelUnknownCommitResult) && !hasCode(err, codeMaxTimeMSExpired):
		if attempt < MaxCommitAttempts {
			return txRetryCommit
		}
		return txFail
	case hasLabel(err, labelTransientTransaction):
		if attempt < MaxTransactionAttempts {
			return txRetry
		}
		return txFail
	}
	return txFail
}

// codeMaxTimeMSExpired: the commit ran out of its time limit; the driver
// does not retry such a commit either (it would run out again).
const codeMaxTimeMSExpired = 50
