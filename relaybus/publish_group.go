package relaybus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// publishGroups is Publish's group commit, leader/follower, with up to
// publishWritersMax writes in flight: a call that finds fewer being
// written and no group forming writes at once, alone, on its own
// goroutine and context (so a single caller pays nothing for the grouping
// but a mutex); a call that finds publishWritersMax being written joins
// the forming group, which is written by a goroutine of its own when one
// of them has finished, when it is full, or wait after it formed,
// whichever comes first. Bus.Publish documents what a group promises each
// call.
type publishGroups struct {
	wait            time.Duration
	now             func() time.Time
	maxPayloadBytes int
	// write writes params in one transaction of the store's.
	write func(ctx context.Context, params *driver.EventPublishParams) error

	mu sync.Mutex
	// writing counts the groups (and lone calls) being written.
	writing int
	// forming is the group calls join, nil when none is forming.
	forming *publishGroup
}

// publishGroup is one group commit: its calls in the order they joined.
type publishGroup struct {
	calls  []*publishCall
	events int
	ids    map[string]struct{}
	timer  *time.Timer
	// sent is set when the group's write starts: calls can no longer
	// leave it. waiting counts the calls still waiting for its outcome;
	// the last one to stop waiting cancels the write (cancel).
	sent    bool
	waiting int
	ctx     context.Context
	cancel  context.CancelFunc
}

// publishCall is one Publish call in a group.
type publishCall struct {
	ctx    context.Context
	params *driver.EventPublishParams
	// done receives the call's outcome (buffered: the group never waits
	// for a caller that stopped waiting).
	done chan error
}

// publishWritersMax is how many writes (groups and lone calls) are in
// flight at once: two, so that a group is sent while the other commits
// (docs/publishing.md, "Group commit").
const publishWritersMax = 2

func newPublishGroups(wait time.Duration, now func() time.Time, maxPayloadBytes int, write func(context.Context, *driver.EventPublishParams) error) *publishGroups {
	return &publishGroups{wait: wait, now: now, maxPayloadBytes: maxPayloadBytes, write: write}
}

// publish writes params (validated, non-empty) alone or with a group,
// and returns the call's outcome.
func (g *publishGroups) publish(ctx context.Context, params *driver.EventPublishParams) error {
	g.mu.Lock()
	if g.writing < publishWritersMax && g.forming == nil {
		// Nothing to wait for: the leader goes at once, alone.
		g.writing++
		g.mu.Unlock()
		err := g.write(ctx, params)
		g.mu.Lock()
		g.finishedLocked()
		g.mu.Unlock()
		return err
	}
	c := &publishCall{ctx: ctx, params: params, done: make(chan error, 1)}
	grp := g.joinLocked(c)
	g.mu.Unlock()

	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case err := <-c.done:
		return err
	default:
	}
	if !grp.sent {
		grp.leave(c)
		if len(grp.calls) == 0 {
			grp.timer.Stop()
			if g.forming == grp {
				g.forming = nil
			}
		}
		return fmt.Errorf("relaybus: publish: %w (before its group commit was sent: nothing was written)", ctx.Err())
	}
	grp.waiting--
	if grp.waiting == 0 {
		grp.cancel()
	}
	return fmt.Errorf("relaybus: publish: %w (while its group commit was written: its events may have committed)", ctx.Err())
}

// joinLocked adds c to the forming group, sending that group first when
// c cannot join it (it would hold too many events, or c republishes an
// event ID of it), and returns c's group.
func (g *publishGroups) joinLocked(c *publishCall) *publishGroup {
	f := g.forming
	if f != nil && !f.fits(c) {
		g.sendLocked(f)
		f = nil
	}
	if f == nil {
		f = &publishGroup{ids: make(map[string]struct{})}
		g.forming = f
		f.timer = time.AfterFunc(g.wait, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.forming == f && len(f.calls) > 0 {
				g.sendLocked(f)
			}
		})
	}
	f.calls = append(f.calls, c)
	f.events += len(c.params.Events)
	for _, ep := range c.params.Events {
		f.ids[ep.Event.ID] = struct{}{}
	}
	if f.events >= MaxEventsPerPublish {
		g.sendLocked(f)
	}
	return f
}

// fits reports whether c can join f: one transaction's events stay within
// MaxEventsPerPublish, and an event ID appears once in it.
func (f *publishGroup) fits(c *publishCall) bool {
	if f.events+len(c.params.Events) > MaxEventsPerPublish {
		return false
	}
	for _, ep := range c.params.Events {
		if _, dup := f.ids[ep.Event.ID]; dup {
			return false
		}
	}
	return true
}

// leave takes c, which stopped waiting before f was sent, out of f.
func (f *publishGroup) leave(c *publishCall) {
	for i, x := range f.calls {
		if x == c {
			f.calls = append(f.calls[:i], f.calls[i+1:]...)
			break
		}
	}
	f.events -= len(c.params.Events)
	for _, ep := range c.params.Events {
		delete(f.ids, ep.Event.ID)
	}
}

// sendLocked starts writing f (non-empty). Its context keeps the first
// call's values (a trace, say) but none of the calls' cancellations: it is
// cancelled only when every call has stopped waiting.
func (g *publishGroups) sendLocked(f *publishGroup) {
	f.timer.Stop()
	f.sent = true
	if g.forming == f {
		g.forming = nil
	}
	g.writing++
	f.waiting = len(f.calls)
	f.ctx, f.cancel = context.WithCancel(context.WithoutCancel(f.calls[0].ctx))
	go g.run(f)
}

// finishedLocked ends a write, and sends the forming group now that fewer
// than publishWritersMax are being written.
func (g *publishGroups) finishedLocked() {
	g.writing--
	if g.writing < publishWritersMax && g.forming != nil {
		g.sendLocked(g.forming)
	}
}

// run writes f and hands each call its outcome.
func (g *publishGroups) run(f *publishGroup) {
	defer f.cancel()
	errs := make([]error, len(f.calls))
	err := g.writeGroup(f)
	if err != nil && len(f.calls) > 1 && errors.Is(err, ErrInvalid) {
		// The store refused the group's data: write each call alone, in
		// the order they joined, so that only the one at fault fails.
		for i, c := range f.calls {
			errs[i] = g.write(f.ctx, c.params)
		}
	} else {
		for i := range errs {
			errs[i] = err
		}
	}
	g.mu.Lock()
	g.finishedLocked()
	g.mu.Unlock()
	for i, c := range f.calls {
		c.done <- errs[i]
	}
}

// writeGroup writes the events of f's calls, in the order they joined, in
// one transaction.
func (g *publishGroups) writeGroup(f *publishGroup) error {
	if len(f.calls) == 1 {
		return g.write(f.ctx, f.calls[0].params)
	}
	params := &driver.EventPublishParams{Events: make([]*driver.EventPublish, 0, f.events), Now: g.now()}
	for _, c := range f.calls {
		params.Events = append(params.Events, c.params.Events...)
	}
	// Each call was validated when it was made; the group is validated
	// (and marked) as one call, which checks that no event ID appears
	// twice in it.
	if err := validatePublish(params, g.maxPayloadBytes); err != nil {
		return fmt.Errorf("relaybus: publish: group commit: %w", err)
	}
	return g.write(f.ctx, params)
}
