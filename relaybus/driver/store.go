package driver

import (
	"context"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Store is what a store implements: the storage a relaybus.Bus runs on.
// It is generic over the caller's
// transaction type so that a service publishes inside its own transaction:
// pgx.Tx for relaybus/postgres, a session context for relaybus/mongo,
// *memory.Tx for relaybus/memory.
//
// Methods are named noun first and take a params struct, so new fields
// never break the interface. Every time a method needs ("Now") comes from
// the params: stores do not read a clock of their own, which keeps every
// process on one machine consistent and makes the conformance suite
// deterministic.
//
// The contract is the lane-lease protocol of 0.2.0 (docs/lane-protocol.md):
// dispatchers lease lanes (LaneOf), not deliveries; a claim writes
// no delivery; a completion deletes the delivery; an attempt is charged when
// it ends in failure or when its lane is taken over after the lease
// expired.
//
// Fenced writes (complete, reschedule, bury, release, extend) take a relaytype.Lease
// and report whether it was still current. false is not an error: it means
// the lane was taken over, or the delivery was released, finished or never
// claimed with that token, and the write changed nothing. A token the store
// cannot have issued (it does not parse) is an ErrInvalid error.
//
// Every method validates its params first (their Validate method), and
// maps its database's errors onto the sentinels of relaytype (ErrNotFound,
// ErrInvalid, ErrClosed, ErrNotDead). Every implementation runs
// relaybus/storetest and asserts the interface at compile time:
//
//	var _ driver.Store[pgx.Tx] = (*Store)(nil)
type Store[TTx any] interface {
	// Setup creates or upgrades the schema. It is idempotent and safe to
	// run from several processes at once.
	Setup(ctx context.Context) error

	// TxBegin, TxCommit and TxRollback manage a transaction of the
	// store's own, used by Publish and by transactional handlers.
	TxBegin(ctx context.Context) (TTx, error)
	TxCommit(ctx context.Context, tx TTx) error
	TxRollback(ctx context.Context, tx TTx) error

	// EventPublishTx inserts events and their deliveries in tx. An event
	// whose ID exists is not inserted again, and gets deliveries only for
	// handlers it never had one for (the event remembers its handlers, so
	// a handler whose delivery was completed and deleted never gets a
	// second one). Keyed events get the next sequence of their key, in
	// commit order: a key's counter stays locked until tx ends. Nothing is
	// visible to claims before tx commits.
	EventPublishTx(ctx context.Context, tx TTx, params *EventPublishParams) (*EventPublishResult, error)

	// DeliveryClaim leases up to params.Limit due deliveries of
	// params.Handlers to params.Owner, from the lanes the owner holds and,
	// when those do not fill the limit, from free lanes and lanes whose
	// lease expired. Taking over an expired lane charges each delivery it
	// had in flight one attempt (a lost attempt) and marks it Suspect; it
	// buries one whose budget that spends only if it was a suspect
	// already (one that was not may merely have run beside the delivery
	// that crashed its process: its next attempt, alone, decides). A
	// keyed delivery is claimed only when no delivery of its handler and
	// key with a lower sequence is pending or in flight. A suspect is
	// returned alone, only when it is the oldest candidate and only to a
	// caller that is not params.Busy; a busy caller whose oldest
	// candidate is a suspect gets nothing and takes no lane. Two concurrent
	// claims never return the same delivery. A store that cannot claim in
	// one step may fail part way: it then returns the deliveries it did
	// claim together with the error, and the caller runs or releases them.
	DeliveryClaim(ctx context.Context, params *DeliveryClaimParams) ([]*relaytype.Delivery, error)

	// LeaseExtend moves the lease expiry of the lanes of the leases to
	// params.ExpiresAt. The result has one entry per lease: whether it was
	// still held.
	LeaseExtend(ctx context.Context, params *LeaseExtendParams) ([]bool, error)

	// DeliveryComplete completes a delivery: it is deleted (and, where the
	// store keeps a completion history, recorded there).
	DeliveryComplete(ctx context.Context, params *DeliveryCompleteParams) (bool, error)
	// DeliveryCompleteMany completes several deliveries at once; one
	// result per lease, in order.
	DeliveryCompleteMany(ctx context.Context, params *DeliveryCompleteManyParams) ([]bool, error)
	// DeliveryCompleteTx completes a delivery inside tx (a transactional
	// handler's). If tx rolls back, the delivery is not completed.
	DeliveryCompleteTx(ctx context.Context, tx TTx, params *DeliveryCompleteParams) (bool, error)

	// DeliveryReschedule charges the failed attempt and makes the delivery
	// claimable again at params.AvailableAt.
	DeliveryReschedule(ctx context.Context, params *DeliveryRescheduleParams) (bool, error)
	// DeliveryBury charges the failed attempt and makes the delivery dead.
	DeliveryBury(ctx context.Context, params *DeliveryBuryParams) (bool, error)
	// DeliveryRelease gives a claimed delivery back without spending an
	// attempt (graceful shutdown before or while its handler ran; a batch
	// held back to fill, params.AvailableAt set): a keyed one is its key's
	// next again.
	DeliveryRelease(ctx context.Context, params *DeliveryReleaseParams) (bool, error)
	// OwnerRelinquish releases everything params.Owner holds through this
	// store instance, without spending attempts, hands its lanes back at
	// once, and returns how many deliveries it released.
	OwnerRelinquish(ctx context.Context, params *OwnerRelinquishParams) (int, error)

	// DeliveryRequeue makes a dead delivery pending again, due at
	// params.Now, with a fresh attempt budget. ErrNotFound if it does not
	// exist, ErrNotDead if it is not dead.
	DeliveryRequeue(ctx context.Context, params *DeliveryRequeueParams) error

	// DeliveryList lists deliveries in ID order, filtered and paged.
	DeliveryList(ctx context.Context, params *DeliveryListParams) (*DeliveryListResult, error)
	// Statistics counts deliveries per status and handler.
	Statistics(ctx context.Context, params *StatisticsParams) (*relaytype.Statistics, error)
	// Purge deletes completion history (and completed rows left by 0.1.0)
	// and dead deliveries past their retention, then events that have no
	// delivery left.
	Purge(ctx context.Context, params *PurgeParams) (*PurgeResult, error)

	// HandlerPause pauses a handler in the store, for every process:
	// HandlersPaused lists it until HandlerResume. Pausing a paused
	// handler changes nothing (the first pause's time and reason stay).
	// The store only records it; the dispatchers read HandlersPaused and
	// leave the paused handlers out of their claims.
	HandlerPause(ctx context.Context, params *HandlerPauseParams) error
	// HandlerResume resumes a paused handler; it reports whether the
	// handler was paused (resuming one that is not changes nothing).
	HandlerResume(ctx context.Context, params *HandlerResumeParams) (bool, error)
	// HandlersPaused lists the paused handlers, in name order. It is
	// read by every dispatcher once per poll: one cheap statement.
	HandlersPaused(ctx context.Context, params *HandlersPausedParams) ([]relaytype.PausedHandler, error)
}

// EventPublisher is an optional capability of a Store: publishing in a
// transaction of the store's own, which the store can make cheaper or
// safer than TxBegin, EventPublishTx and TxCommit: relaybus/postgres
// sends the whole transaction in one round trip (an implicit transaction
// of one pipelined batch); relaybus/mongo retries it itself when the
// database refuses it for a transient conflict (MongoDB fails a second
// transaction on the same key at once instead of making it wait).
// Bus.Publish uses it when the store has it (for each group commit), and
// otherwise runs TxBegin, EventPublishTx and TxCommit, which cannot
// retry.
type EventPublisher interface {
	EventPublish(ctx context.Context, params *EventPublishParams) (*EventPublishResult, error)
}

// EventPublishParams are the arguments of EventPublishTx.
type EventPublishParams struct {
	Events []*EventPublish
	// Now stamps the rows; events with a zero CreatedAt get it too.
	Now time.Time

	// validated is set by a Bus that validated p (see mark.go).
	validated publishMark
}

// EventPublish is one event and the deliveries it must get.
type EventPublish struct {
	Event      *relaytype.Event
	Deliveries []DeliverySpec
}

// DeliverySpec is one handler an event is delivered to.
type DeliverySpec struct {
	Handler     string
	MaxAttempts int
}

// EventPublishResult reports what EventPublishTx wrote.
type EventPublishResult struct {
	// Inserted has one entry per event: false when the event existed.
	Inserted []bool
	// Sequences has one entry per event: its per-key sequence (0 when
	// unkeyed; the stored one when the event existed).
	Sequences []int64
	// Deliveries counts the deliveries inserted.
	Deliveries int
}

// DeliveryClaimParams are the arguments of DeliveryClaim.
type DeliveryClaimParams struct {
	Owner         string
	Handlers      []string // only deliveries of these handlers; required
	Limit         int
	LeaseDuration time.Duration
	Now           time.Time

	// Busy says the caller has deliveries in flight: a handler running, a
	// lease held, or a completion queued or being written (a queued
	// completion's delivery is charged too if the process dies). A
	// lane-lease store then returns no suspect, and when a suspect is the
	// oldest candidate it returns nothing at all and takes no lanes, so
	// that the caller drains and gets the suspect, alone, in its first
	// claim with nothing in flight. A caller that is not busy gets a
	// suspect only alone, when it is the oldest candidate.
	Busy bool

	// KeyRuns asks, for the handlers it lists, for runs of a key instead
	// of its head alone: a store that offers them (KeyRunClaimer) returns
	// with a keyed delivery of such a handler the deliveries of its
	// (handler, key) that follow it, up to KeyRun.Max in all, as one run:
	// consecutive pending deliveries in sequence order (dead ones do not
	// count and do not stop it), all due, none a suspect, starting at the
	// key's head and only while nothing of the key is in flight (the
	// per-key rule holds for the run's first delivery as it does for a
	// head). The run stops at the first delivery that is not due or is a
	// suspect. A claim that cannot return a whole run (its limit, or its
	// lane's quota) returns a prefix of it, never a later delivery without
	// the ones before it. A head that is a suspect is claimed alone, as
	// always. A store without the capability ignores KeyRuns and returns
	// heads only: a run of one, which is still correct.
	KeyRuns []KeyRun

	// namesValidated is set by a Bus that checked Owner and Handlers (see
	// mark.go).
	namesValidated namesMark
}

// KeyRun is one entry of DeliveryClaimParams.KeyRuns: the handler, one
// of the claim's Handlers, and the most deliveries of one of its keys a
// claim returns as a run, in [1, MaxKeyRun].
type KeyRun struct {
	Handler string
	Max     int
}

// KeyRunClaimer is implemented by a store whose DeliveryClaim honours
// DeliveryClaimParams.KeyRuns. ClaimsKeyRuns reports whether it does (a
// wrapper reports what the store it wraps does). The conformance suite
// holds a store that says so to the run rules, and any other store to
// heads only.
type KeyRunClaimer interface {
	ClaimsKeyRuns() bool
}

// ClaimsKeyRuns reports whether s honours DeliveryClaimParams.KeyRuns.
func ClaimsKeyRuns(s any) bool {
	c, ok := s.(KeyRunClaimer)
	return ok && c.ClaimsKeyRuns()
}

// CompletingClaimer is implemented by a store that can write the
// completions of some deliveries and claim others in one transaction
// (DeliveryCompleteClaim): one commit, and one flush of its log, where
// DeliveryCompleteMany and then DeliveryClaim make two, and the claim sees
// the keys the completions freed. ClaimsCompletions reports whether
// DeliveryCompleteClaim may be called (a wrapper has the method whatever
// it wraps, and reports what the store it wraps does). A dispatcher whose
// store says so lets each claim carry the successes waiting to be
// completed (relaybus.Config.CompletionBatchWindow).
type CompletingClaimer interface {
	ClaimsCompletions() bool
	// DeliveryCompleteClaim completes params.Complete's leases as
	// DeliveryCompleteMany does and then, in the same transaction,
	// claims as DeliveryClaim does with params.Claim. A claim that takes
	// more than one round trip (DeliveryClaim's contract allows it)
	// writes the completions in the first. Result.Completed has one entry
	// per lease once the completions committed, and is nil when they may
	// not have: the caller must then write them again, on their own. On
	// an error a result may still hold what was written: Completed when
	// the completions committed, Claimed what the committed round trips
	// claimed, as DeliveryClaim returns it.
	DeliveryCompleteClaim(ctx context.Context, params *DeliveryCompleteClaimParams) (*DeliveryCompleteClaimResult, error)
}

// ClaimsCompletions reports whether s may be asked to complete and claim
// in one transaction (CompletingClaimer).
func ClaimsCompletions(s any) bool {
	c, ok := s.(CompletingClaimer)
	return ok && c.ClaimsCompletions()
}

// DeliveryCompleteClaimParams are the arguments of DeliveryCompleteClaim.
type DeliveryCompleteClaimParams struct {
	Complete DeliveryCompleteManyParams
	Claim    DeliveryClaimParams
}

// DeliveryCompleteClaimResult is what DeliveryCompleteClaim wrote.
type DeliveryCompleteClaimResult struct {
	// Completed has one entry per lease of the completions, as
	// DeliveryCompleteMany returns them; nil when they were not (or may
	// not have been) committed.
	Completed []bool
	// Claimed are the deliveries claimed, as DeliveryClaim returns them.
	Claimed []*relaytype.Delivery
}

// LeaseExtendParams are the arguments of LeaseExtend.
type LeaseExtendParams struct {
	Owner     string
	Leases    []relaytype.Lease
	ExpiresAt time.Time
	Now       time.Time
}

// DeliveryCompleteParams are the arguments of DeliveryComplete(Tx).
type DeliveryCompleteParams struct {
	Lease relaytype.Lease
	Now   time.Time
}

// DeliveryCompleteManyParams are the arguments of DeliveryCompleteMany.
type DeliveryCompleteManyParams struct {
	Leases []relaytype.Lease
	Now    time.Time
}

// DeliveryRescheduleParams are the arguments of DeliveryReschedule.
type DeliveryRescheduleParams struct {
	Lease       relaytype.Lease
	Error       string
	AvailableAt time.Time
	Now         time.Time
}

// DeliveryBuryParams are the arguments of DeliveryBury.
type DeliveryBuryParams struct {
	Lease relaytype.Lease
	Error string
	Now   time.Time
}

// DeliveryReleaseParams are the arguments of DeliveryRelease.
type DeliveryReleaseParams struct {
	Lease relaytype.Lease
	Now   time.Time
	// AvailableAt, when set and later than the delivery's AvailableAt,
	// is when it is due again (a batch handler's wait to fill a batch,
	// relaybus.BatchOptions.MaxWait): until then it is not claimed, and
	// neither is anything of its key after it. Zero: due as it was.
	AvailableAt time.Time
}

// OwnerRelinquishParams are the arguments of OwnerRelinquish.
type OwnerRelinquishParams struct {
	Owner string
	Now   time.Time
}

// DeliveryRequeueParams are the arguments of DeliveryRequeue.
type DeliveryRequeueParams struct {
	DeliveryID string
	Now        time.Time
}

// DeliveryListParams filter and page DeliveryList. Zero values do not
// filter.
type DeliveryListParams struct {
	Status  relaytype.Status
	Handler string
	Key     string
	EventID string
	// Limit is the page size: 0 means DefaultListLimit, at most
	// MaxListLimit.
	Limit int
	// After is the Next of the previous page, or empty for the first.
	After string
}

// DeliveryListResult is one page of DeliveryList.
type DeliveryListResult struct {
	Deliveries []*relaytype.Delivery
	// Next is the cursor of the next page; empty on the last page.
	Next string
}

// StatisticsParams are the arguments of Statistics.
type StatisticsParams struct {
	Now time.Time
}

// PurgeParams are the arguments of Purge. A zero time purges nothing of
// that kind.
type PurgeParams struct {
	// CompletedBefore: delete completed deliveries completed before it.
	CompletedBefore time.Time
	// DeadBefore: delete dead deliveries last updated before it.
	DeadBefore time.Time
	// Limit bounds the deliveries deleted by one call (0 = no bound).
	Limit int
	Now   time.Time
}

// PurgeResult reports what Purge deleted.
type PurgeResult struct {
	Deliveries int64
	Events     int64
}
