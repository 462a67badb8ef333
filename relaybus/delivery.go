package relaybus

import "github.com/berkcansavur/relaybus/relaybus/relaytype"

// Delivery is what a handler gets: one (event, handler) pair, with its
// own attempts (Attempts is this attempt's number), retry schedule and
// dead letter, and the event's ID, type, key, payload and headers. The
// fields are documented on relaytype.Delivery, which this names: the
// store returns the same row. A handler must not modify it.
type Delivery = relaytype.Delivery

// Status is the state of a delivery, as ListDeliveries filters and
// reports it.
type Status = relaytype.Status

// The statuses of a delivery (see relaytype.StatusPending and the others
// for what each means to a store).
const (
	// StatusPending: waiting to be claimed (possibly not due yet).
	StatusPending = relaytype.StatusPending
	// StatusProcessing: in flight under a dispatcher's lease.
	StatusProcessing = relaytype.StatusProcessing
	// StatusCompleted: its handler succeeded (listed only where the store
	// keeps a completion history; see Statistics).
	StatusCompleted = relaytype.StatusCompleted
	// StatusDead: its attempt budget is spent (a dead letter); Requeue
	// brings it back.
	StatusDead = relaytype.StatusDead
)

// Finish is how one claimed delivery's attempt ended, as
// Config.AfterFinish reports it.
type Finish struct {
	// Delivery is the delivery as it was claimed (Attempts is the attempt
	// that ran, LeaseToken the claim's token). It must not be modified.
	Delivery *Delivery
	Outcome  FinishOutcome
	// Err is the final write's error (FinishWriteFailed); nil otherwise.
	Err error
}

// FinishOutcome says what the store recorded for an attempt.
type FinishOutcome string

// The outcomes of Finish.
const (
	// FinishCompleted: the handler succeeded and the completion committed.
	FinishCompleted FinishOutcome = "completed"
	// FinishRescheduled: the attempt failed and the delivery will run
	// again after its backoff.
	FinishRescheduled FinishOutcome = "rescheduled"
	// FinishBuried: the attempt failed and the delivery is a dead letter
	// (its budget spent, or a Permanent error).
	FinishBuried FinishOutcome = "buried"
	// FinishReleased: the delivery was given back without spending an
	// attempt (a shutdown, Config.BeforeComplete failed, or a batch given
	// back to fill, BatchOptions.MaxWait).
	FinishReleased FinishOutcome = "released"
	// FinishLeaseLost: the final write found the lease taken over; what
	// the attempt did is not recorded, and the new holder runs it.
	FinishLeaseLost FinishOutcome = "lease_lost"
	// FinishWriteFailed: the final write failed until the lease would
	// expire (Err says why); the delivery runs again after it does.
	FinishWriteFailed FinishOutcome = "write_failed"
)
