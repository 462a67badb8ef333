package relaybus

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus/driver"
)

// TestPublishParamsValidatedOnce: the params a Bus builds are validated
// once, by the Bus, and the store's Validate trusts them while they hold
// what the Bus validated; a copy given other events or another time, a
// lower payload limit of the store, and params built by anyone else are
// validated in full.
func TestPublishParamsValidatedOnce(t *testing.T) {
	t.Parallel()
	b, err := New[*fakeTx](newFakeStore(), Config{MaxPayloadBytes: 100})
	require.NoError(t, err)
	require.NoError(t, b.Declare("t", "h", nil))
	p, err := b.publishParams([]*Event{{Type: "t", Payload: make([]byte, 50)}})
	require.NoError(t, err)
	require.NoError(t, p.Validate(100))

	// Trusted: the events are not looked at again, so an edit made in
	// place after the Bus validated them goes unseen (the mark is not a
	// checksum; whoever holds the params is trusted not to edit them).
	p.Events[0].Event.Key = "k\x00"
	require.NoError(t, p.Validate(100))
	require.NoError(t, p.Validate(1000), "a store allowing more trusts a stricter Bus")

	cp := *p
	require.NoError(t, cp.Validate(100), "a copy holding the same events lost the mark")
	cp.Events = slices.Clone(p.Events)
	require.ErrorIs(t, cp.Validate(100), ErrInvalid, "a copy with other events carried the mark")
	cp = *p
	cp.Now = cp.Now.Add(time.Second)
	require.ErrorIs(t, cp.Validate(100), ErrInvalid, "a copy with another time carried the mark")
	cp = *p
	cp.Events = cp.Events[:0]
	require.ErrorIs(t, cp.Validate(100), ErrInvalid, "a copy with no events carried the mark")

	p.Events[0].Event.Key = "k"
	require.ErrorIs(t, p.Validate(10), ErrInvalid, "a store with a lower payload limit trusted the Bus's higher one")
	require.ErrorContains(t, p.Validate(10), "the store's MaxPayloadBytes option")

	direct := &driver.EventPublishParams{Now: time.Now(), Events: []*driver.EventPublish{{
		Event: &Event{ID: "e", Type: "t", Key: "k\x00"}, Deliveries: []driver.DeliverySpec{{Handler: "h", MaxAttempts: 1}},
	}}}
	require.ErrorIs(t, direct.Validate(0), ErrInvalid, "params a store gets directly are validated")

	_, err = b.publishParams([]*Event{{Type: "t", Payload: make([]byte, 101)}})
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "Config.MaxPayloadBytes", "the Bus names its own limit")
}

// TestClaimParamsNamesValidatedOnce: the dispatcher's claims carry the
// owner and handler names it validated at Start; their limit and time are
// still checked at every claim, and a copy with another owner or other
// handlers is checked in full.
func TestClaimParamsNamesValidatedOnce(t *testing.T) {
	t.Parallel()
	d, err := newDispatcher[*fakeTx](newFakeStore(), testConfigWithDefaults(t), []string{"h"}, nil)
	require.NoError(t, err)
	p := d.claim // as claimLoop makes each claim's params
	p.Limit, p.Now = 1, time.Now()
	require.NoError(t, p.Validate())

	p.Handlers = slices.Clone(p.Handlers)
	p.Handlers[0] = "bad\x00name"
	require.ErrorIs(t, p.Validate(), ErrInvalid, "a copy with other handlers carried the mark")
	p = d.claim
	p.Limit, p.Now = 1, time.Now()
	p.Owner = "bad\x00owner"
	require.ErrorIs(t, p.Validate(), ErrInvalid, "a copy with another owner carried the mark")

	p = d.claim
	p.Limit, p.Now = 1, time.Now()
	names := p.Handlers[0]
	p.Handlers[0] = "bad\x00name" // in place: the names are not checked again
	require.NoError(t, p.Validate(), "the names were checked again")
	p.Handlers[0] = names
	p.Limit = MaxClaimLimit + 1
	require.ErrorIs(t, p.Validate(), ErrInvalid, "the limit was trusted")
	p.Limit, p.Now = 1, time.Time{}
	require.ErrorIs(t, p.Validate(), ErrInvalid, "the time was trusted")

	unmarked := driver.DeliveryClaimParams{Owner: "o", Handlers: []string{"bad\x00name"}, Limit: 1, LeaseDuration: time.Second, Now: time.Now()}
	require.ErrorIs(t, unmarked.Validate(), ErrInvalid, "params a store gets directly are validated")

	_, err = newDispatcher[*fakeTx](newFakeStore(), testConfigWithDefaults(t), []string{strings.Repeat("h", MaxHandlerNameBytes+1)}, nil)
	require.ErrorIs(t, err, ErrInvalid, "a bad name passed Start")
}

func testConfigWithDefaults(t *testing.T) Config {
	t.Helper()
	cfg, err := testConfig().withDefaults()
	require.NoError(t, err)
	return cfg
}
