package driver

import (
	"context"
	"errors"
)

// Waker is an optional capability of a Store: it tells an idle
// dispatcher that work may have become claimable (a publish committed,
// another process handed its lanes back), so that it claims at once
// instead of at its next poll. A wake-up is a hint and nothing more: a
// store may coalesce, delay or lose wake-ups, and a wake-up may announce
// work that is gone by the time the claim looks. The poll stays the path
// that finds everything (retries falling due, leases expiring, a publish
// whose announcement was lost), so a lost wake-up costs latency, never a
// delivery.
//
// Without it (or with relaybus.Config.DisableWakeups), a dispatcher finds
// new work at its next poll (relaybus.Config.PollInterval), as it always
// does. The PostgreSQL store implements it with LISTEN/NOTIFY, the memory
// store in process.
type Waker interface {
	// WakeListen listens for wake-ups on a connection of its own until
	// ctx is done or the listening fails, and calls params.Wake for each
	// one. It calls params.Listening once it is listening and knows that
	// wake-ups reach it: work announced before that moment may have been
	// missed, so the caller claims at once then.
	//
	// It returns ctx's error once ctx is done; an error wrapping
	// ErrWakeUnavailable when wake-ups cannot work where the store runs
	// (a connection pooler that keeps no session for the listener), which
	// the caller reports once and falls back to polling for; an error
	// wrapping ErrWakeDisabled when the store is configured to announce
	// nothing, after which the caller does not listen again; and any other
	// error when listening stopped (a lost connection), after which the
	// caller listens again after a backoff.
	WakeListen(ctx context.Context, params *WakeListenParams) error

	// WakeSend announces, outside any publish, that work may have become
	// claimable: the Bus calls it after it handed its lanes back at
	// shutdown, so that the other processes take them without waiting for
	// their poll. Best effort; an error is logged, not retried.
	WakeSend(ctx context.Context, params *WakeSendParams) error
}

// ErrWakeUnavailable is wrapped by the error of a WakeListen that found
// that wake-ups cannot reach a listener where the store runs: behind
// PgBouncer in transaction or statement pooling, for example, LISTEN runs
// on a server connection that is handed to someone else as soon as the
// statement ends, so no notification ever comes back. The Bus says so
// once in its log and polls.
var ErrWakeUnavailable = errors.New("relaybus: wake-ups unavailable")

// ErrWakeDisabled is wrapped by the error of a WakeListen of a store
// configured to announce nothing (relaybus/postgres:
// Options.DisableWakeups): listening would never hear anything. The Bus
// says so once at Info, stops listening and polls.
var ErrWakeDisabled = errors.New("relaybus: wake-ups disabled in the store")

// WakeListenParams are the arguments of WakeListen.
type WakeListenParams struct {
	// Listening is called once the listener listens and has seen that
	// wake-ups reach it. May be nil.
	Listening func()
	// Wake is called for each wake-up, on the listener's goroutine: it
	// must return at once (the Bus signals a channel).
	Wake func()
}

// Validate checks p.
func (p *WakeListenParams) Validate() error {
	if p == nil {
		return invalidf("wake listen params are nil")
	}
	if p.Wake == nil {
		return invalidf("wake listen: Wake is nil")
	}
	return nil
}

// WakeSendParams are the arguments of WakeSend. None yet: a struct so that
// a field added later does not change the method.
type WakeSendParams struct{}

// Validate checks p.
func (p *WakeSendParams) Validate() error {
	if p == nil {
		return invalidf("wake send params are nil")
	}
	return nil
}
