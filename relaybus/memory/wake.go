package memory

import (
	"context"
	"sync"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// Wake-ups in process (driver.Waker): a commit that added deliveries, and
// WakeSend, signal every listener of the store, so that a Bus on a memory
// store claims new work at once, as one on PostgreSQL does. A listener
// holds at most one signal: a burst of commits while its Bus claims is one
// wake-up.

// wakeHub is the store's set of listeners.
type wakeHub struct {
	mu        sync.Mutex
	listeners map[chan struct{}]struct{}
}

// announce signals every listener without waiting for any.
func (h *wakeHub) announce() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for c := range h.listeners {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (h *wakeHub) add(c chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listeners == nil {
		h.listeners = make(map[chan struct{}]struct{})
	}
	h.listeners[c] = struct{}{}
}

func (h *wakeHub) remove(c chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.listeners, c)
}

// WakeListen implements driver.Waker: it calls params.Wake after every
// commit that added deliveries and every WakeSend, until ctx is done, and
// returns ctx's error. It listens from the moment it is called, so it
// calls params.Listening at once.
func (s *Store) WakeListen(ctx context.Context, params *driver.WakeListenParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	c := make(chan struct{}, 1)
	s.wake.add(c)
	defer s.wake.remove(c)
	if params.Listening != nil {
		params.Listening()
	}
	for {
		select {
		case <-c:
			params.Wake()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// WakeSend implements driver.Waker: it wakes every listener.
func (s *Store) WakeSend(ctx context.Context, params *driver.WakeSendParams) error {
	if err := params.Validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wake.announce()
	return nil
}
