// Package validate checks that one benchmark run was exact: every
// published event handled by every handler once, nothing unexpected,
// per-key order kept, nothing left pending, and dead letters exactly
// where the scenario planted them.
package validate

import (
	"github.com/berkcansavur/relaybus/bench/record"
)

// Input is everything one run (a window after its drain) left behind.
type Input struct {
	Published []record.Published // all publisher and preload records of the run
	Handled   []record.Handled   // all dispatcher records of the run
	Handlers  []string           // the handler names every event has (the workload's)
	Final     Final              // the store's state after the drain (role inspect)
	Expect    Expect
}

// Final is the store's state after the drain.
type Final struct {
	Pending, Processing, Dead int64
	DeadLetters               []DeadLetter
	// DeadLettersTruncated: the inspect role listed only some of the
	// dead letters, so the dead-letter comparison is incomplete.
	DeadLettersTruncated bool
}

// DeadLetter is one dead (event, handler) delivery.
type DeadLetter struct {
	EventID, Handler string
}

// Expect is what the scenario planted.
type Expect struct {
	// PoisonEventIDs are events planted to fail until dead-lettered:
	// their deliveries must be dead, not handled ok.
	PoisonEventIDs map[string]bool
	// AllowRedelivery: fault scenarios (a SIGKILLed dispatcher, a
	// database restart) may hand a delivery to a handler more than once
	// (at-least-once); an extra ok handle is then counted as a
	// redelivery, not a duplicate.
	AllowRedelivery bool
}

// Result is the verdict with its counts.
type Result struct {
	Valid bool
	// Published: distinct events published; Uncertain: of those, the ones
	// whose commit outcome is unknown; Expected: (event, handler) pairs
	// that must be handled (certain, non-poison events x handlers).
	Published, Uncertain, Expected int64

	// HandledOK: (event, handler) pairs with at least one ok handle.
	HandledOK int64
	// Lost: expected pairs with no ok handle that are not dead letters
	// (a dead non-poison pair is counted once, as DeadUnexpected);
	// LostPoison: certain poison pairs neither handled nor dead (a planted
	// failure that vanished), also a loss.
	Lost, LostPoison int64
	// Unexpected: ok handles of an event never published or of a handler
	// the workload does not have.
	Unexpected int64
	// Duplicates: extra ok handles of a pair (violation);
	// Redeliveries: the same when Expect.AllowRedelivery (not a violation).
	Duplicates, Redeliveries int64
	// OrderViolations: per (handler, key), ok handles taken in handle
	// order (ties by sequence) whose sequence does not strictly increase,
	// and keyed ok handles with a sequence <= 0. Without AllowRedelivery a
	// duplicate of a keyed delivery is therefore also an order violation;
	// with it, a repeat of a handled sequence is not, but a first handle
	// of sequence n after a first handle of a later one is.
	OrderViolations int64
	// Pending, Processing: deliveries left after the drain (violation).
	Pending, Processing int64
	// DeadExpected: dead poison pairs; DeadUnexpected: dead letters that
	// are not poison pairs (violation).
	DeadExpected, DeadUnexpected int64
	// PoisonHandled: ok handles of poison events (violation).
	PoisonHandled int64
	// DeadLettersUnverified: the store listed only part of its dead
	// letters, so they could not be checked (violation: the run cannot
	// be called exact).
	DeadLettersUnverified bool
	// TooLarge: the input exceeds MaxRecords and was not checked.
	TooLarge bool
	// Failures: failed handler calls; not a violation by itself.
	Failures int64
	// Examples: up to MaxExamples concrete violations, human-readable.
	Examples []string
}

// MaxRecords bounds each of Input.Published and Input.Handled: indexes
// are int32 to keep a million-record run compact. A larger run is
// reported INVALID (TooLarge), never checked partially.
const MaxRecords = 1<<31 - 1

// MaxExamples bounds Result.Examples.
const MaxExamples = 10

// Validate checks in. It never modifies in.
func Validate(in *Input) *Result {
	return validate(in)
}
