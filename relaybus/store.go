package relaybus

import "github.com/berkcansavur/relaybus/relaybus/driver"

// Store is the storage a Bus runs on, as a service holds it: a
// relaybus/memory, relaybus/postgres or relaybus/mongo store, or one
// wrapped by otel.WrapStore, generic over the store's transaction type
// (what PublishTx and a HandleTx handler get). It names driver.Store, the
// interface a store implements (its methods and their params are the
// store author's API, in package relaybus/driver); a service that only
// passes a store to New need not name it at all.
type Store[TTx any] = driver.Store[TTx]
