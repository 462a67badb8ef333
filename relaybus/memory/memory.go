package memory

import (
	"bytes"
	"container/heap"
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
	// until Purge removes it: the in-memory form of the PostgreSQL store's
	// CompletionHistory. False, the default, deletes a delivery when it
	// completes, as every 0.2.0 store does.
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

// Store is an in-memory relaybus.Store with the 0.2.0 lane-lease
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
	lanes      [relaybus.LaneCount]lane
	// The claim indexes (index.go).
	candidates map[laneHandler]*dueHeap // by lane and handler
	keys       map[handlerKey]*keyQueue // pending deliveries of each keyed (handler, key)
}

var _ relaybus.Store[*Tx] = (*Store)(nil)

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
	id          int64
	ev          *event
	handler     string
	lane        int
	status      relaybus.Status // pending, dead, or completed when retained
	attempts    int             // attempts that have ended (failed or lost)
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

// DeliveryClaim implements relaybus.Store with the lane protocol of the
// PostgreSQL store (docs/lane-protocol.md): pick from the lanes
// (params.Owner, this store) holds, then, while that does not fill the
// limit, take 4, 8, 16, ... more lanes that are free or abandoned and have
// due work, oldest due work first; taking an abandoned lane charges what
// it had in flight. A suspect is returned alone, only as the first thing
// the claim finds and only to a caller that is not params.Busy; a busy
// caller whose oldest candidate is a suspect gets nothing and takes no
// lane. Lanes left with nothing in flight are handed back.
//
// Candidates come from the indexes (index.go): a claim costs about
// Limit heap operations plus the lanes it looks at, whatever the backlog.
func (s *Store) DeliveryClaim(ctx context.Context, params *relaybus.DeliveryClaimParams) ([]*relaybus.Delivery, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	expiresAt := now.Add(params.LeaseDuration)
	handlers := slices.Compact(slices.Sorted(slices.Values(params.Handlers)))

	s.mu.Lock()
	defer s.mu.Unlock()

	var own []int
	for i := range s.lanes {
		if s.lanes[i].held(params.Owner, s.holder, now) {
			own = append(own, i)
		}
	}
	picked, blocked := s.pickFrom(own, handlers, params.Limit, !params.Busy, params.Busy, now, expiresAt)
	tried := map[int]bool{}
	for step := claimTakeFirst; !blocked && len(picked) < params.Limit && !(len(picked) == 1 && picked[0].suspect); step *= 2 {
		taken := s.take(min(step, params.Limit-len(picked), relaybus.LaneCount), handlers, tried, params.Owner, now, expiresAt)
		if len(taken) == 0 {
			break
		}
		for _, l := range taken {
			tried[l] = true
		}
		var more []*delivery
		more, blocked = s.pickFrom(taken, handlers, params.Limit-len(picked), !params.Busy && len(picked) == 0, params.Busy, now, expiresAt)
		picked = append(picked, more...)
	}
	slices.SortFunc(picked, cmpDue)
	out := make([]*relaybus.Delivery, len(picked))
	for i, d := range picked {
		out[i] = s.snapshot(d)
	}
	return out, nil
}

// pickFrom claims up to limit of the candidates of lanes, records them in
// flight, and hands back each of lanes left with nothing in flight.
// allowSuspect: a suspect may be returned, alone, when it is the oldest
// candidate. busy (the caller has deliveries in flight): when the oldest
// candidate is a suspect, nothing is picked and blocked is true, so that
// the claim takes no lanes either and the caller drains (a busy caller
// holding a suspect lets another delivery's crash charge it).
func (s *Store) pickFrom(lanes []int, handlers []string, limit int, allowSuspect, busy bool, now, expiresAt time.Time) (picks []*delivery, blocked bool) {
	if busy {
		if first := s.topCandidates(lanes, handlers, 1, true, now); len(first) > 0 && first[0].suspect {
			blocked = true
			limit = 0 // still hand back the lanes left with nothing in flight
		}
	}
	cand := s.topCandidates(lanes, handlers, limit, allowSuspect, now)
	switch {
	case len(cand) > 0 && cand[0].suspect:
		picks = cand[:1]
	default:
		for _, d := range cand {
			if !d.suspect {
				picks = append(picks, d)
			}
		}
	}
	for _, d := range picks {
		l := &s.lanes[d.lane]
		l.inFlight[d.id] = d
		l.expiresAt = expiresAt
		s.setInFlight(d, true)
	}
	for _, i := range lanes {
		if l := &s.lanes[i]; len(l.inFlight) == 0 {
			l.handBack()
		}
	}
	return picks, blocked
}

// topCandidates returns the first limit candidates of lanes and handlers
// due at now, by (AvailableAt, ID); suspects only when allowSuspect. It
// walks the candidate heaps as one: a frontier of heap nodes, popping the
// least and pushing its children, so it looks at about limit nodes.
func (s *Store) topCandidates(lanes []int, handlers []string, limit int, allowSuspect bool, now time.Time) []*delivery {
	f := &frontier{}
	for _, l := range lanes {
		for _, h := range handlers {
			if dh := s.candidates[laneHandler{l, h}]; dh != nil && len(dh.items) > 0 {
				f.nodes = append(f.nodes, node{dh, 0})
			}
		}
	}
	heap.Init(f)
	var out []*delivery
	for f.Len() > 0 && len(out) < limit {
		n := heap.Pop(f).(node)
		d := n.h.items[n.i]
		if d.availableAt.After(now) {
			continue // its subtree is later still
		}
		if allowSuspect || !d.suspect {
			out = append(out, d)
		}
		for _, c := range []int{2*n.i + 1, 2*n.i + 2} {
			if c < len(n.h.items) {
				heap.Push(f, node{n.h, c})
			}
		}
	}
	return out
}

// node is a position in a candidate heap; frontier orders nodes by the
// delivery there.
type node struct {
	h *dueHeap
	i int
}

type frontier struct{ nodes []node }

func (f *frontier) Len() int { return len(f.nodes) }
func (f *frontier) Less(i, j int) bool {
	return dueBefore(f.nodes[i].h.items[f.nodes[i].i], f.nodes[j].h.items[f.nodes[j].i])
}
func (f *frontier) Swap(i, j int) { f.nodes[i], f.nodes[j] = f.nodes[j], f.nodes[i] }
func (f *frontier) Push(x any)    { f.nodes = append(f.nodes, x.(node)) }
func (f *frontier) Pop() any {
	n := f.nodes[len(f.nodes)-1]
	f.nodes = f.nodes[:len(f.nodes)-1]
	return n
}

// take takes up to n lanes that a claim may take, are not in tried, and
// have due work of handlers (a candidate, or a delivery in flight under
// an expired lease), oldest due work first. Taking raises the epoch and
// leases the lane to (owner, this store); taking an abandoned lane charges
// each delivery it had in flight one attempt and marks it a suspect (see
// charge). It returns the lanes taken.
func (s *Store) take(n int, handlers []string, tried map[int]bool, owner string, now, expiresAt time.Time) []int {
	type want struct {
		lane int
		due  *delivery
	}
	var ws []want
	for i := range s.lanes {
		l := &s.lanes[i]
		if tried[i] || !l.takeable(now) {
			continue
		}
		due := s.oldestDue(i, handlers, now)
		for _, d := range l.inFlight {
			if slices.Contains(handlers, d.handler) && !d.availableAt.After(now) && (due == nil || dueBefore(d, due)) {
				due = d
			}
		}
		if due != nil {
			ws = append(ws, want{i, due})
		}
	}
	slices.SortFunc(ws, func(a, b want) int {
		if c := cmpDue(a.due, b.due); c != 0 {
			return c
		}
		return a.lane - b.lane
	})
	var taken []int
	for _, w := range ws[:min(n, len(ws))] {
		l := &s.lanes[w.lane]
		l.epoch++
		l.owner, l.holder, l.expiresAt = owner, s.holder, expiresAt
		for _, d := range l.inFlight {
			s.charge(d, now)
		}
		taken = append(taken, w.lane)
	}
	return taken
}

// charge counts the lost attempt of d, in flight in a lane being taken
// over: it becomes a suspect, and is buried if that spends its budget and
// it was a suspect already. One that was not may only have run beside the
// delivery that crashed the process; its next attempt, which runs alone,
// decides (docs/lane-protocol.md, Claim step 3, variant BURY_ANY).
func (s *Store) charge(d *delivery, now time.Time) {
	s.leave(d)
	wasSuspect := d.suspect
	d.attempts++
	d.claims++
	d.suspect = true
	d.updatedAt = now
	if wasSuspect && d.attempts >= d.maxAttempts {
		d.lastError = expiredFinalAttempt
		s.setStatus(d, relaybus.StatusDead)
		return
	}
	s.place(d)
}

// leave takes d out of its lane's in-flight list.
func (s *Store) leave(d *delivery) {
	delete(s.lanes[d.lane].inFlight, d.id)
	s.setInFlight(d, false)
}

// LeaseExtend implements relaybus.Store: it moves the expiry of the lanes
// of the leases that are current (the delivery is in flight in the
// token's lane, at its epoch, under its claims) and whose lane
// (params.Owner, this store) holds. A lease that is not current extends
// nothing, not even a lane its owner holds.
func (s *Store) LeaseExtend(ctx context.Context, params *relaybus.LeaseExtendParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ls, err := parseLeases("extend", params.Leases)
	if err != nil {
		return nil, err
	}
	expiresAt := params.ExpiresAt.Round(0)
	return s.writeCurrent(ctx, ls, func(pl lease, _ *delivery) bool {
		l := &s.lanes[pl.Token.Lane]
		if l.owner != params.Owner || l.holder != s.holder {
			return false
		}
		l.expiresAt = expiresAt
		return true
	})
}

// DeliveryComplete implements relaybus.Store.
func (s *Store) DeliveryComplete(ctx context.Context, params *relaybus.DeliveryCompleteParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "complete", params.Lease, func(d *delivery) { s.complete(d, params.Now.Round(0)) })
}

// DeliveryCompleteMany implements relaybus.Store. Every lease is parsed
// before anything is written.
func (s *Store) DeliveryCompleteMany(ctx context.Context, params *relaybus.DeliveryCompleteManyParams) ([]bool, error) {
	if err := params.Validate(); err != nil {
		return nil, err
	}
	ls, err := parseLeases("complete", params.Leases)
	if err != nil {
		return nil, err
	}
	now := params.Now.Round(0)
	return s.writeCurrent(ctx, ls, func(_ lease, d *delivery) bool { s.complete(d, now); return true })
}

// DeliveryReschedule implements relaybus.Store. The failed attempt is
// charged here, when it ends.
func (s *Store) DeliveryReschedule(ctx context.Context, params *relaybus.DeliveryRescheduleParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "reschedule", params.Lease, func(d *delivery) {
		s.leave(d)
		d.attempts++
		d.claims++
		d.suspect = false
		d.availableAt = params.AvailableAt.Round(0)
		d.lastError = relaybus.TruncateError(params.Error)
		d.updatedAt = params.Now.Round(0)
		s.place(d)
	})
}

// DeliveryBury implements relaybus.Store.
func (s *Store) DeliveryBury(ctx context.Context, params *relaybus.DeliveryBuryParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "bury", params.Lease, func(d *delivery) {
		s.leave(d)
		d.attempts++
		d.claims++
		d.suspect = false
		d.lastError = relaybus.TruncateError(params.Error)
		d.updatedAt = params.Now.Round(0)
		s.setStatus(d, relaybus.StatusDead)
	})
}

// DeliveryRelease implements relaybus.Store: no attempt is spent, and a
// suspect stays one.
func (s *Store) DeliveryRelease(ctx context.Context, params *relaybus.DeliveryReleaseParams) (bool, error) {
	if err := params.Validate(); err != nil {
		return false, err
	}
	return s.fenced(ctx, "release", params.Lease, func(d *delivery) { s.release(d, params.Now.Round(0)) })
}

// fenced is the shape of every single-lease write (validated already):
// parse the lease, then writeCurrent.
func (s *Store) fenced(ctx context.Context, op string, l relaybus.Lease, write func(*delivery)) (bool, error) {
	pl, err := parseLease(op, l)
	if err != nil {
		return false, err
	}
	out, err := s.writeCurrent(ctx, []lease{pl}, func(_ lease, d *delivery) bool { write(d); return true })
	if err != nil {
		return false, err
	}
	return out[0], nil
}

// writeCurrent is the shape of every lease write, once its leases are
// parsed: honour a cancelled ctx, then under the lock call write for each
// lease that is still current (in its order), reporting per lease
// whether it was current and write took it.
func (s *Store) writeCurrent(ctx context.Context, ls []lease, write func(pl lease, d *delivery) bool) ([]bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(ls))
	for i, pl := range ls {
		if d := s.current(pl); d != nil {
			out[i] = write(pl, d)
		}
	}
	return out, nil
}

// OwnerRelinquish implements relaybus.Store: every lane (params.Owner,
// this store) holds, expired or not (nobody took it over, so what it has
// in flight did not end in a crash), has its deliveries released and is
// handed back.
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
	n := 0
	for i := range s.lanes {
		l := &s.lanes[i]
		if l.owner != params.Owner || l.holder != s.holder {
			continue
		}
		for _, d := range l.inFlight {
			s.release(d, now)
			n++
		}
		l.handBack()
	}
	return n, nil
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
		return fmt.Errorf("relaybus/memory: requeue delivery %q (status %s): %w", params.DeliveryID, s.statusOf(d), relaybus.ErrNotDead)
	}
	d.attempts = 0
	d.claims++
	d.suspect = false
	d.availableAt = now
	d.updatedAt = now
	s.setStatus(d, relaybus.StatusPending)
	return nil
}

// DeliveryList implements relaybus.Store. The cursor is the last ID of
// the previous page; IDs are ordered as numbers, not as text. A pending
// delivery in flight is listed as processing.
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
			(params.Status != "" && s.statusOf(d) != params.Status) ||
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
		res.Deliveries[i] = s.snapshot(d)
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
		switch s.statusOf(d) {
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
	// Events follow the completed retention, never the dead one (an event
	// is the trace that its completed handlers ran): none goes while
	// completed ones are kept forever.
	cutoff := params.CompletedBefore
	for id, e := range s.events {
		if !cutoff.IsZero() && e.deliveries == 0 && e.insertedAt.Before(cutoff) {
			delete(s.events, id)
			res.Events++
		}
	}
	return res, nil
}

// current returns the delivery l leases if the lease is current: the
// delivery exists, is pending, in flight in the token's lane at the
// token's epoch, and its claims counter is the token's. Otherwise nil.
func (s *Store) current(l lease) *delivery {
	d := s.deliveries[l.ID]
	if d == nil || d.status != relaybus.StatusPending || !d.inFlight || d.lane != l.Token.Lane ||
		d.claims != l.Token.Claims || s.lanes[d.lane].epoch != l.Token.Epoch {
		return nil
	}
	return d
}

func (s *Store) complete(d *delivery, now time.Time) {
	if !s.retainCompleted {
		s.remove(d)
		return
	}
	s.leave(d)
	d.attempts++ // the attempt that succeeded, as in the PostgreSQL history
	d.completedAt = now
	d.updatedAt = now
	s.setStatus(d, relaybus.StatusCompleted)
}

// release gives d back without spending an attempt.
func (s *Store) release(d *delivery, now time.Time) {
	s.leave(d)
	d.claims++
	d.updatedAt = now
	s.place(d)
}

func (s *Store) remove(d *delivery) {
	if d.inFlight {
		delete(s.lanes[d.lane].inFlight, d.id)
	}
	delete(s.deliveries, d.id)
	s.unindex(d)
	d.ev.deliveries--
}

// statusOf is d's status as listed: a pending delivery in flight is
// processing.
func (s *Store) statusOf(d *delivery) relaybus.Status {
	if d.status == relaybus.StatusPending && d.inFlight {
		return relaybus.StatusProcessing
	}
	return d.status
}

// snapshot copies d out, so callers never alias the store's state. A
// delivery in flight gets its lease and counts its running attempt.
func (s *Store) snapshot(d *delivery) *relaybus.Delivery {
	e := &d.ev.ev
	out := &relaybus.Delivery{
		ID:             strconv.FormatInt(d.id, 10),
		EventID:        e.ID,
		EventType:      e.Type,
		Key:            e.Key,
		Sequence:       d.ev.seq,
		Payload:        bytes.Clone(e.Payload),
		Headers:        maps.Clone(e.Headers),
		EventCreatedAt: e.CreatedAt,
		Handler:        d.handler,
		Status:         s.statusOf(d),
		Attempts:       d.attempts,
		MaxAttempts:    d.maxAttempts,
		AvailableAt:    d.availableAt,
		LastError:      d.lastError,
		Suspect:        d.suspect,
		CreatedAt:      d.createdAt,
		UpdatedAt:      d.updatedAt,
		CompletedAt:    d.completedAt,
	}
	if d.inFlight {
		l := &s.lanes[d.lane]
		out.Attempts++
		out.LeaseOwner = l.owner
		out.LeaseExpiresAt = l.expiresAt
		out.LeaseToken = relaybus.LaneToken{Lane: d.lane, Epoch: l.epoch, Claims: d.claims}.String()
	}
	return out
}

// parseID reads a delivery ID this store handed out (see
// relaybus.ParseDeliveryID).
func parseID(s string) (int64, bool) { return relaybus.ParseDeliveryID(s) }

// lease is a parsed relaybus.Lease of this store.
type lease = relaybus.DecimalLease

// parseLease reads a lease this store handed out: an ID or token of
// another form is an ErrInvalid error and the call writes nothing (see
// relaybus.ParseDecimalLease).
func parseLease(op string, l relaybus.Lease) (lease, error) {
	pl, err := relaybus.ParseDecimalLease(l)
	if err != nil {
		return lease{}, fmt.Errorf("relaybus/memory: %s: %w", op, err)
	}
	return pl, nil
}

// parseLeases parses every lease of a call before anything is written.
func parseLeases(op string, ls []relaybus.Lease) ([]lease, error) {
	out, err := relaybus.ParseDecimalLeases(ls)
	if err != nil {
		return nil, fmt.Errorf("relaybus/memory: %s: %w", op, err)
	}
	return out, nil
}
