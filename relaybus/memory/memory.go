package memory

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus"
)

// Options configure a Store. The zero value is valid.
type Options struct {
	// RetainCompleted keeps a completed delivery, with status completed,
	// until Purge removes it (the 0.1.0 PostgreSQL behaviour). False, the
	// default, deletes a delivery when it completes (the 0.2.0 stores).
	RetainCompleted bool
	// MaxPayloadBytes bounds event payloads: 0 means
	// relaybus.DefaultMaxPayloadBytes, at most relaybus.MaxPayloadBytesLimit.
	// A value out of range makes Setup and every publish fail with
	// relaybus.ErrInvalid.
	MaxPayloadBytes int
}

var (
	// ErrTxDone: the transaction was already committed or rolled back.
	ErrTxDone = errors.New("relaybus/memory: transaction already committed or rolled back")
	// ErrLeaseLost: TxCommit found that a lease completed with
	// DeliveryCompleteTx is no longer current; nothing was applied.
	ErrLeaseLost = errors.New("relaybus/memory: a lease completed in the transaction was lost before commit")
)

// expiredFinalAttempt is the LastError of a delivery buried by a takeover.
const expiredFinalAttempt = "lease expired after the final attempt"

// leaseTokenBytes is the entropy of a lease token: enough that a token
// cannot be guessed, so only the claimer can write under it.
const leaseTokenBytes = 16

// Store is an in-memory relaybus.Store. Create it with New; it is safe
// for concurrent use.
type Store struct {
	retainCompleted bool
	maxPayloadBytes int
	optionsErr      error // a bad Options value, reported by Setup and publish

	mu         sync.Mutex
	lastID     int64               // delivery ids are 1, 2, 3, ... as decimal strings
	events     map[string]*event   // by event id
	deliveries map[int64]*delivery // every stored delivery
	keySeq     map[string]int64    // last sequence given to each key; never goes back, even after Purge
	// The claim indexes (index.go): what claims look at instead of every
	// delivery.
	handlers map[string]*handlerIndex // by handler
	keys     map[handlerKey]*keyQueue // live deliveries of each keyed (handler, key)
}

var _ relaybus.Store[*Tx] = (*Store)(nil)

// event is a stored event.
type event struct {
	ev relaybus.Event // owned copy; CreatedAt is set
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
	id             int64
	ev             *event
	handler        string
	status         relaybus.Status
	attempts       int
	maxAttempts    int
	availableAt    time.Time
	lastError      string
	leaseOwner     string
	leaseToken     string
	leaseExpiresAt time.Time
	createdAt      time.Time
	updatedAt      time.Time
	completedAt    time.Time
	// heap is the claim heap d is in (nil for none) and heapIndex its
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
		handlers:        make(map[string]*handlerIndex),
		keys:            make(map[handlerKey]*keyQueue),
		keySeq:          make(map[string]int64),
	}
	if s.maxPayloadBytes == 0 {
		s.maxPayloadBytes = relaybus.DefaultMaxPayloadBytes
	}
	if s.maxPayloadBytes < 0 || s.maxPayloadBytes > relaybus.MaxPayloadBytesLimit {
		s.optionsErr = fmt.Errorf("relaybus/memory: Options.MaxPayloadBytes %d out of range [0, %d]: %w",
			opts.MaxPayloadBytes, relaybus.MaxPayloadBytesLimit, relaybus.ErrInvalid)
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

// DeliveryClaim implements relaybus.Store. Candidates are taken in
// AvailableAt order, then ID order, whether pending or under an expired
// lease. A keyed delivery is a candidate only while it is the head of its
// handler and key: the live delivery with the lowest sequence, due or
// not.
//
// The claim reads the indexes (index.go) rather than every delivery: it
// merges each wanted handler's pending heap, popped in order, with the
// expired leases, which it collects and sorts. It costs about
// O(Limit * handlers * log n) plus O(e log e) for e expired leases.
func (s *Store) DeliveryClaim(ctx context.Context, params *relaybus.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)

	s.mu.Lock()
	defer s.mu.Unlock()

	var pending []*dueHeap
	var expired []*delivery
	for _, h := range params.Handlers {
		hi := s.handlers[h]
		if hi == nil || slices.Contains(pending, hi.pending) { // no deliveries yet, or named twice
			continue
		}
		pending = append(pending, hi.pending)
		expired = hi.leased.appendDue(expired, now)
	}
	// A processing delivery behind its key's head (possible after a
	// requeue gave the key a lower sequence) must wait like a pending one.
	expired = slices.DeleteFunc(expired, func(d *delivery) bool { return !s.isHead(d) })
	slices.SortFunc(expired, cmpDue)

	// Burials wait until the claim is done: burying a head hands its key
	// to the next delivery, which a claim must not take in the same call
	// (it was not the head when the claim began).
	var buried []*delivery
	defer func() {
		for _, d := range buried {
			s.bury(d, expiredFinalAttempt, now)
		}
	}()

	var out []*relaybus.Delivery
	for len(out) < params.Limit {
		d := earliestDue(pending, now)
		if len(expired) > 0 && (d == nil || dueBefore(expired[0], d)) {
			d, expired = expired[0], expired[1:]
		}
		if d == nil {
			break
		}
		if d.status == relaybus.StatusProcessing && d.attempts >= d.maxAttempts {
			// A takeover counts the crashed attempt; with the budget spent
			// the delivery is a dead letter, not work.
			buried = append(buried, d)
			continue
		}
		token, err := newLeaseToken()
		if err != nil {
			return nil, err
		}
		d.attempts++
		d.leaseOwner = params.Owner
		d.leaseToken = token
		d.leaseExpiresAt = now.Add(params.LeaseDuration)
		d.updatedAt = now
		// Out of the pending heap (or moved within the lease heap); the
		// lease is current, so this call does not see d again.
		s.setStatus(d, relaybus.StatusProcessing)
		out = append(out, d.snapshot())
	}
	return out, nil
}

// earliestDue returns the first due delivery of the heaps, by
// (AvailableAt, ID), or nil if none is due.
func earliestDue(heaps []*dueHeap, now time.Time) *delivery {
	var first *delivery
	for _, h := range heaps {
		if d := h.peekDue(now); d != nil && (first == nil || dueBefore(d, first)) {
			first = d
		}
	}
	return first
}

// LeaseExtend implements relaybus.Store. A lease must also belong to
// params.Owner.
func (s *Store) LeaseExtend(ctx context.Context, params *relaybus.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(params.Leases))
	for i, l := range params.Leases {
		d := s.leased(l)
		if d == nil || d.leaseOwner != params.Owner {
			continue
		}
		d.leaseExpiresAt = params.ExpiresAt.Round(0)
		d.updatedAt = params.Now.Round(0)
		s.place(d) // its place in the lease heap moved
		out[i] = true
	}
	return out, nil
}

// DeliveryComplete implements relaybus.Store.
func (s *Store) DeliveryComplete(ctx context.Context, params *relaybus.DeliveryCompleteParams) (bool, error) {
	return s.fenced(ctx, params.Validate, func() relaybus.Lease { return params.Lease }, func(d *delivery) {
		s.complete(d, params.Now.Round(0))
	})
}

// DeliveryCompleteMany implements relaybus.Store.
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *relaybus.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(params.Leases))
	for i, l := range params.Leases {
		if d := s.leased(l); d != nil {
			s.complete(d, now)
			out[i] = true
		}
	}
	return out, nil
}

// DeliveryReschedule implements relaybus.Store. The attempt was counted
// when the delivery was claimed.
func (s *Store) DeliveryReschedule(ctx context.Context, params *relaybus.DeliveryRescheduleParams) (bool, error) {
	return s.fenced(ctx, params.Validate, func() relaybus.Lease { return params.Lease }, func(d *delivery) {
		d.clearLease()
		d.availableAt = params.AvailableAt.Round(0)
		d.lastError = relaybus.TruncateError(params.Error)
		d.updatedAt = params.Now.Round(0)
		s.setStatus(d, relaybus.StatusPending)
	})
}

// DeliveryBury implements relaybus.Store.
func (s *Store) DeliveryBury(ctx context.Context, params *relaybus.DeliveryBuryParams) (bool, error) {
	return s.fenced(ctx, params.Validate, func() relaybus.Lease { return params.Lease }, func(d *delivery) {
		s.bury(d, params.Error, params.Now.Round(0))
	})
}

// DeliveryRelease implements relaybus.Store.
func (s *Store) DeliveryRelease(ctx context.Context, params *relaybus.DeliveryReleaseParams) (bool, error) {
	return s.fenced(ctx, params.Validate, func() relaybus.Lease { return params.Lease }, func(d *delivery) {
		s.release(d, params.Now.Round(0))
	})
}

// fenced is the shape of every single-lease write: validate the params
// (validate is the params' Validate method, which catches a nil params;
// lease is read only after it passed), honour a cancelled ctx, and apply
// write under the lock only if the lease is still current, reporting
// whether it was.
func (s *Store) fenced(ctx context.Context, validate func() error, lease func() relaybus.Lease, write func(*delivery)) (bool, error) {
	if err := validate(); err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.leased(lease())
	if d == nil {
		return false, nil
	}
	write(d)
	return true, nil
}

// OwnerRelinquish implements relaybus.Store. It releases expired leases
// of the owner too: they were not taken over, so their attempts did not
// end in a crash.
func (s *Store) OwnerRelinquish(ctx context.Context, params *relaybus.OwnerRelinquishParams) (int, error) {
	if err := params.Validate(); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	// Collect first: releasing moves a delivery out of the lease heap
	// being walked.
	var held []*delivery
	for _, hi := range s.handlers {
		for _, d := range hi.leased.items {
			if d.leaseOwner == params.Owner {
				held = append(held, d)
			}
		}
	}
	for _, d := range held {
		s.release(d, now)
	}
	return len(held), nil
}

// DeliveryRequeue implements relaybus.Store. LastError is kept: it says
// why the delivery died.
func (s *Store) DeliveryRequeue(ctx context.Context, params *relaybus.DeliveryRequeueParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	var d *delivery
	if id, ok := parseID(params.DeliveryID); ok {
		d = s.deliveries[id]
	}
	if d == nil {
		return fmt.Errorf("relaybus/memory: requeue delivery %q: %w", params.DeliveryID, relaybus.ErrNotFound)
	}
	if d.status != relaybus.StatusDead {
		return fmt.Errorf("relaybus/memory: requeue delivery %q (status %s): %w", params.DeliveryID, d.status, relaybus.ErrNotDead)
	}
	d.attempts = 0
	d.availableAt = now
	d.updatedAt = now
	s.setStatus(d, relaybus.StatusPending)
	return nil
}

// DeliveryList implements relaybus.Store. The cursor is the last ID of
// the previous page; IDs are ordered as numbers, not as text.
func (s *Store) DeliveryList(ctx context.Context, params *relaybus.DeliveryListParams) (*relaybus.DeliveryListResult, error) {
	limit, err := params.Validate()
	if err != nil {
		return nil, err
	}
	var after int64
	if params.After != "" {
		var ok bool
		if after, ok = parseID(params.After); !ok {
			return nil, fmt.Errorf("relaybus/memory: list: cursor %q is not one this store returned: %w", params.After, relaybus.ErrInvalid)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var match []*delivery
	for _, d := range s.deliveries {
		if d.id <= after ||
			(params.Status != "" && d.status != params.Status) ||
			(params.Handler != "" && d.handler != params.Handler) ||
			(params.Key != "" && d.ev.ev.Key != params.Key) ||
			(params.EventID != "" && d.ev.ev.ID != params.EventID) {
			continue
		}
		match = append(match, d)
	}
	sort.Slice(match, func(i, j int) bool { return match[i].id < match[j].id })
	res := &relaybus.DeliveryListResult{}
	if len(match) > limit {
		match = match[:limit]
		res.Next = strconv.FormatInt(match[limit-1].id, 10)
	}
	res.Deliveries = make([]*relaybus.Delivery, len(match))
	for i, d := range match {
		res.Deliveries[i] = d.snapshot()
	}
	return res, nil
}

// Statistics implements relaybus.Store.
func (s *Store) Statistics(ctx context.Context, params *relaybus.StatisticsParams) (*relaybus.Statistics, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &relaybus.Statistics{Handlers: make(map[string]relaybus.Counts)}
	for _, d := range s.deliveries {
		hc := st.Handlers[d.handler]
		switch d.status {
		case relaybus.StatusPending:
			st.Pending++
			hc.Pending++
			if age := now.Sub(d.availableAt); age > st.OldestDueAge {
				st.OldestDueAge = age
			}
		case relaybus.StatusProcessing:
			st.Processing++
			hc.Processing++
		case relaybus.StatusCompleted:
			st.Completed++
			hc.Completed++
		case relaybus.StatusDead:
			st.Dead++
			hc.Dead++
		}
		st.Handlers[d.handler] = hc
	}
	return st, nil
}

// Purge implements relaybus.Store. Deliveries go in ID order, so a
// bounded purge removes the oldest first. An event with no delivery left
// is deleted once it was published before the later of the two cutoffs:
// until then it remembers its handlers, so a redelivered event does not
// run them again.
func (s *Store) Purge(ctx context.Context, params *relaybus.PurgeParams) (*relaybus.PurgeResult, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var doomed []*delivery
	for _, d := range s.deliveries {
		switch {
		case d.status == relaybus.StatusCompleted && !params.CompletedBefore.IsZero() && d.completedAt.Before(params.CompletedBefore),
			d.status == relaybus.StatusDead && !params.DeadBefore.IsZero() && d.updatedAt.Before(params.DeadBefore):
			doomed = append(doomed, d)
		}
	}
	sort.Slice(doomed, func(i, j int) bool { return doomed[i].id < doomed[j].id })
	if params.Limit > 0 && len(doomed) > params.Limit {
		doomed = doomed[:params.Limit]
	}
	res := &relaybus.PurgeResult{}
	for _, d := range doomed {
		s.remove(d)
		res.Deliveries++
	}
	cutoff := params.CompletedBefore
	if params.DeadBefore.After(cutoff) {
		cutoff = params.DeadBefore
	}
	for id, e := range s.events {
		if e.deliveries == 0 && e.insertedAt.Before(cutoff) {
			delete(s.events, id)
			res.Events++
		}
	}
	return res, nil
}

// leased returns the delivery l currently leases, or nil.
func (s *Store) leased(l relaybus.Lease) *delivery {
	id, ok := parseID(l.DeliveryID)
	if !ok {
		return nil
	}
	d := s.deliveries[id]
	if d == nil || d.status != relaybus.StatusProcessing || d.leaseToken != l.Token {
		return nil
	}
	return d
}

func (s *Store) complete(d *delivery, now time.Time) {
	if !s.retainCompleted {
		s.remove(d)
		return
	}
	d.clearLease()
	d.completedAt = now
	d.updatedAt = now
	s.setStatus(d, relaybus.StatusCompleted)
}

func (s *Store) bury(d *delivery, reason string, now time.Time) {
	d.clearLease()
	d.lastError = relaybus.TruncateError(reason)
	d.updatedAt = now
	s.setStatus(d, relaybus.StatusDead)
}

// release gives d back without spending the attempt its claim counted.
func (s *Store) release(d *delivery, now time.Time) {
	d.clearLease()
	if d.attempts > 0 {
		d.attempts--
	}
	d.updatedAt = now
	s.setStatus(d, relaybus.StatusPending)
}

func (s *Store) remove(d *delivery) {
	delete(s.deliveries, d.id)
	s.unindex(d)
	d.ev.deliveries--
}

func (d *delivery) clearLease() {
	d.leaseOwner = ""
	d.leaseToken = ""
	d.leaseExpiresAt = time.Time{}
}

// snapshot copies d out, so callers never alias the store's state.
func (d *delivery) snapshot() *relaybus.Delivery {
	e := &d.ev.ev
	return &relaybus.Delivery{
		ID:             strconv.FormatInt(d.id, 10),
		EventID:        e.ID,
		EventType:      e.Type,
		Key:            e.Key,
		Sequence:       d.ev.seq,
		Payload:        bytes.Clone(e.Payload),
		Headers:        maps.Clone(e.Headers),
		EventCreatedAt: e.CreatedAt,
		Handler:        d.handler,
		Status:         d.status,
		Attempts:       d.attempts,
		MaxAttempts:    d.maxAttempts,
		AvailableAt:    d.availableAt,
		LastError:      d.lastError,
		LeaseOwner:     d.leaseOwner,
		LeaseToken:     d.leaseToken,
		LeaseExpiresAt: d.leaseExpiresAt,
		CreatedAt:      d.createdAt,
		UpdatedAt:      d.updatedAt,
		CompletedAt:    d.completedAt,
	}
}

// parseID reads a delivery id this store formatted. Only the canonical
// form is accepted, so "007" cannot alias delivery 7.
func parseID(s string) (int64, bool) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != s {
		return 0, false
	}
	return id, true
}

func newLeaseToken() (string, error) {
	var b [leaseTokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("relaybus/memory: lease token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
