package relaybus

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPublishParamsValidatedOnce: the params a Bus builds are validated
// once, by the Bus, and the store's Validate trusts them; a copy, a lower
// payload limit of the store, and params built by anyone else are
// validated in full.
func TestPublishParamsValidatedOnce(t *testing.T) {
	t.Parallel()
	b, err := New[*fakeTx](newFakeStore(), Config{MaxPayloadBytes: 100})
	require.NoError(t, err)
	require.NoError(t, b.Declare("t", "h", nil))
	p, err := b.publishParams([]*Event{{Type: "t", Payload: make([]byte, 50)}})
	require.NoError(t, err)
	require.NoError(t, p.Validate(100))

	// Trusted: the events are not looked at again. (Breaking one after
	// the Bus validated it is only possible here, inside the package.)
	p.Events[0].Event.Key = "k\x00"
	require.NoError(t, p.Validate(100))
	require.NoError(t, p.Validate(1000), "a store allowing more trusts a stricter Bus")

	cp := *p
	require.ErrorIs(t, cp.Validate(100), ErrInvalid, "a copy carried the mark")
	p.Events[0].Event.Key = "k"
	require.ErrorIs(t, p.Validate(10), ErrInvalid, "a store with a lower payload limit trusted the Bus's higher one")

	direct := &EventPublishParams{Now: time.Now(), Events: []*EventPublish{{
		Event: &Event{ID: "e", Type: "t", Key: "k\x00"}, Deliveries: []DeliverySpec{{Handler: "h", MaxAttempts: 1}},
	}}}
	require.ErrorIs(t, direct.Validate(0), ErrInvalid, "params a store gets directly are validated")
}

// TestClaimParamsNamesValidatedOnce: the dispatcher's claims carry the
// owner and handler names it validated at Start; their limit and time are
// still checked at every claim.
func TestClaimParamsNamesValidatedOnce(t *testing.T) {
	t.Parallel()
	d, err := newDispatcher[*fakeTx](newFakeStore(), testConfigWithDefaults(t), []string{"h"}, nil)
	require.NoError(t, err)
	p := d.claim
	p.Limit, p.Now, p.namesValidated = 1, time.Now(), &p
	require.NoError(t, p.Validate())
	p.Handlers = []string{"bad\x00name"} // inside the package only
	require.NoError(t, p.Validate(), "the names were checked again")
	cp := p
	require.ErrorIs(t, cp.Validate(), ErrInvalid, "a copy carried the mark")
	p.Limit = MaxClaimLimit + 1
	require.ErrorIs(t, p.Validate(), ErrInvalid, "the limit was trusted")
	p.Limit, p.Now = 1, time.Time{}
	require.ErrorIs(t, p.Validate(), ErrInvalid, "the time was trusted")

	_, err = newDispatcher[*fakeTx](newFakeStore(), testConfigWithDefaults(t), []string{strings.Repeat("h", MaxHandlerNameBytes+1)}, nil)
	require.ErrorIs(t, err, ErrInvalid, "a bad name passed Start")
}

func testConfigWithDefaults(t *testing.T) Config {
	t.Helper()
	cfg, err := testConfig().withDefaults()
	require.NoError(t, err)
	return cfg
}
