package memory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// RetainCompleted keeps a completed delivery, with status completed,
	// until Purge removes it: the in-memory form of the PostgreSQL store's
	// CompletionHistory. False, the default, deletes a delivery when it
	// completes, as every 0.2.0 store does.
	RetainCompleted bool
	// MaxPayloadBytes bounds event payloads: 0 means
	// driver.DefaultMaxPayloadBytes, at most driver.MaxPayloadBytesLimit.
	// A value out of range makes Setup and every publish fail with
	// relaytype.ErrInvalid.
	MaxPayloadBytes int
}

var (
	// ErrTxDone: the transaction was already committed or rolled back.
	ErrTxDone = errors.New("relaybus/memory: transaction already committed or rolled back")
	// ErrLeaseLost: TxCommit found that a lease completed with
	// DeliveryCompleteTx is no longer current; nothing was applied. A
	// takeover cannot cause it (it skips a lane while a transaction holds a
	// completion in it), but the holder's own release or reschedule of the
	// same delivery can.
	ErrLeaseLost = errors.New("relaybus/memory: a lease completed in the transaction was lost before commit")
)

// expiredFinalAttempt is the LastError of a delivery buried by a takeover.
const expiredFinalAttempt = "lease expired after the final attempt"

// claimTakeFirst is how many lanes a claim takes at its first step when
// the lanes it holds do not fill its limit; each further step takes twice
// as many (the PostgreSQL store's rule).
const claimTakeFirst = 4

// holderBytes is the entropy of a store instance's holder name.
const holderBytes = 12

// Store is an in-memory driver.Store with the 0.2.0 lane-lease
// semantics. Create it with New; it is safe for concurrent use.
type Store struct {
	retainCompleted bool
	maxPayloadBytes int
	optionsErr      error // a bad Options value, reported by Setup and publish
	// holder names this store instance in the lanes it holds (with the
	// owner): new at every New, like a process's.
	holder string

	mu         sync.Mutex
	lastID     int64               // delivery ids are 1, 2, 3, ... as decimal strings
	events     map[string]*event   // by event id
	deliveries map[int64]*delivery // every stored delivery
	keySeq     map[string]int64    // last sequence given to each key; never goes back, even after Purge
	lanes      [driver.LaneCount]lane
	// The claim indexes (index.go).
	candidates map[laneHandler]*dueHeap // by lane and handler
	keys       map[handlerKey]*keyQueue // pending deliveries of each keyed (handler, key)

	// wake are the wake-up listeners (wake.go), under a mutex of their
	// own: announcing takes it under mu, listening never takes mu.
	wake wakeHub

	// paused are the paused handlers (pause.go), by name, under a mutex
	// of their own: a pause is not part of any transaction.
	pausedMu sync.Mutex
	paused   map[string]relaytype.PausedHandler
}

var (
	_ driver.Store[*Tx] = (*Store)(nil)
	_ driver.Waker      = (*Store)(nil)
)

// lane is one of the LaneCount lanes, as a lane row of the PostgreSQL
// store: leased by (owner, holder) until expiresAt, with the deliveries
// claimed in it in flight.
type lane struct {
	epoch         int64
	owner, holder string // empty when the lane is free
	expiresAt     time.Time
	// inFlight are the deliveries claimed under the lease and not finished:
	// exactly those with delivery.inFlight set. Unlike the PostgreSQL
	// store, a completion takes its delivery out at once.
	inFlight map[int64]*delivery
	// txLocks counts the transactions holding a completion in this lane
	// (PostgreSQL's FOR KEY SHARE): a takeover skips the lane meanwhile.
	txLocks int
}

// held reports whether (owner, holder) holds l at now.
func (l *lane) held(owner, holder string, now time.Time) bool {
	return l.owner == owner && l.holder == holder && l.expiresAt.After(now)
}

// takeable reports whether a claim may take l at now: free, or its lease
// expired, and no transaction holds a completion in it.
func (l *lane) takeable(now time.Time) bool {
	return (l.owner == "" || !l.expiresAt.After(now)) && l.txLocks == 0
}

func (l *lane) handBack() {
	l.owner, l.holder, l.expiresAt = "", "", time.Time{}
}

// event is a stored event.
type event struct {
	ev relaytype.Event // owned copy; CreatedAt is set
	// seq is the per-key sequence (0 when unkeyed).
	seq int64
	// handlers is every handler the event ever had a delivery for. It
	// outlives completed deliveries, so a repeated publish does not run a
	// completed handler again.
	handlers map[string]struct{}
	// deliveries counts the stored deliveries of the event; Purge deletes
	// the event when it is 0.
	deliveries int
	// insertedAt is the publish's Now: the event's age for retention.
	insertedAt time.Time
}

// delivery is a stored delivery.
type delivery struct {
	id          int64
	ev          *event
	handler     string
	lane        int
	status      relaytype.Status // pending, dead, or completed when retained
	attempts    int              // attempts that have ended (failed or lost)
	maxAttempts int
	claims      int64 // raised by every write that ends a claim without deleting
	suspect     bool  // in flight when its lane was taken over
	inFlight    bool  // in its lane's inFlight
	availableAt time.Time
	lastError   string
	createdAt   time.Time
	updatedAt   time.Time
	completedAt time.Time
	// heap is the candidate heap d is in (nil for none) and heapIndex its
	// position there; see index.go.
	heap      *dueHeap
	heapIndex int
}

// New returns an empty store. opts may be nil.
func New(opts *Options) *Store {
	if opts == nil {
		opts = &Options{}
	}
	s := &Store{
		retainCompleted: opts.RetainCompleted,
		maxPayloadBytes: opts.MaxPayloadBytes,
		events:          make(map[string]*event),
		deliveries:      make(map[int64]*delivery),
		candidates:      make(map[laneHandler]*dueHeap),
		keys:            make(map[handlerKey]*keyQueue),
		keySeq:          make(map[string]int64),
	}
	var h [holderBytes]byte
	// crypto/rand.Read never returns an error (Go 1.24+): it crashes the
	// program instead when the system's source fails.
	_, _ = rand.Read(h[:])
	s.holder = hex.EncodeToString(h[:])
	for i := range s.lanes {
		s.lanes[i].inFlight = make(map[int64]*delivery)
	}
	if s.maxPayloadBytes == 0 {
		s.maxPayloadBytes = driver.DefaultMaxPayloadBytes
	}
	if s.maxPayloadBytes < 0 || s.maxPayloadBytes > driver.MaxPayloadBytesLimit {
		s.optionsErr = fmt.Errorf("relaybus/memory: Options.MaxPayloadBytes %d out of range [0, %d]: %w",
			opts.MaxPayloadBytes, driver.MaxPayloadBytesLimit, relaytype.ErrInvalid)
	}
	return s
}

// Setup has no schema to create; it reports a bad Options value.
func (s *Store) Setup(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.optionsErr
}
