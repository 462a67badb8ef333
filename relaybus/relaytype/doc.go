// Package relaytype holds the rows and values that a relaybus user and a
// relaybus store share: the Event a service publishes, the Delivery a
// handler gets and a store keeps, its Status and Lease, the Counts and
// Statistics of a store, the StoreHealth a store may report, and the
// sentinel errors every store returns and every caller tests with
// errors.Is.
//
// It imports only the standard library, so package relaybus (the user's
// API) and package relaybus/driver (the store's) both build on it without
// importing each other's concerns. A user need not import it: package
// relaybus declares an alias of each of these names (relaybus.Event is
// relaytype.Event). A store author reads it beside relaybus/driver.
package relaytype
