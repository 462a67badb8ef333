package mongo

import (
	"errors"
	"fmt"

	"github.com/berkcansavur/relaybus/relaybus"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// errPrefix starts every error of this package.
const errPrefix = "relaybus/mongo: "

// invalidf returns an error that wraps relaybus.ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf(errPrefix+format+": %w", append(args, relaybus.ErrInvalid)...)
}

// errorFrom turns a driver error into this package's error: the text says
// what the store was doing, the driver error stays in the chain (so
// errors.As finds mongo.ServerError and its labels), and the conditions
// relaybus has sentinels for wrap those sentinels too:
//
//   - mongo.ErrNoDocuments -> relaybus.ErrNotFound
//   - mongo.ErrClientDisconnected -> relaybus.ErrClosed
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
		return fmt.Errorf("%s%s: %w: %w", errPrefix, op, relaybus.ErrNotFound, err)
	case errors.Is(err, mongo.ErrClientDisconnected):
		return fmt.Errorf("%s%s: %w: %w", errPrefix, op, relaybus.ErrClosed, err)
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
