package driver

import (
	"time"
	"unicode/utf8"

	"github.com/berkcansavur/relaybus/relaybus/internal/check"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// Validate methods check store params. Every store calls them first, so a
// bad call is an ErrInvalid error in every store alike, and nothing is
// written.
//
// Validated once, at the edge: the Bus validates what it hands a store
// where it enters (Publish and PublishTx validate the events; Start the
// owner and handler names), and marks the params it built, so that the
// store's own Validate does not do the work again (mark.go says what the
// mark covers). Params built by anyone else carry no mark and are
// validated in full, so a store called directly is held to every rule.

// Validate checks p; maxPayloadBytes 0 means DefaultMaxPayloadBytes. Params
// that a Bus validated against a payload limit no larger than
// maxPayloadBytes are not checked again.
func (p *EventPublishParams) Validate(maxPayloadBytes int) error {
	return p.validate(maxPayloadBytes, storePayloadLimit)
}

// validate is Validate with the name of the payload limit that applies
// (the Bus's when it validates what it builds; see mark.go).
func (p *EventPublishParams) validate(maxPayloadBytes int, limit string) error {
	if p == nil {
		return invalidf("publish params are nil")
	}
	if maxPayloadBytes <= 0 {
		maxPayloadBytes = DefaultMaxPayloadBytes
	}
	if p.validated.holds(p, maxPayloadBytes) {
		return nil
	}
	if len(p.Events) == 0 {
		return invalidf("publish: no events")
	}
	if len(p.Events) > MaxEventsPerPublish {
		return invalidf("publish: %d events, over the limit of %d", len(p.Events), MaxEventsPerPublish)
	}
	if err := checkNow(p.Now); err != nil {
		return err
	}
	seen := make(map[string]struct{}, len(p.Events))
	for i, ep := range p.Events {
		if ep == nil || ep.Event == nil {
			return invalidf("publish: event %d is nil", i)
		}
		if err := validateEvent(ep.Event, maxPayloadBytes, limit); err != nil {
			return err
		}
		if _, dup := seen[ep.Event.ID]; dup {
			return invalidf("publish: event id %q appears twice in one call", ep.Event.ID)
		}
		seen[ep.Event.ID] = struct{}{}
		if at := ep.Event.DeliverAt; !at.IsZero() && at.Sub(p.Now) > MaxDeliverDelay {
			return invalidf("publish: event %q: deliver at %s is %v after the publish, over the limit of %v", ep.Event.ID, at.Format(time.RFC3339), at.Sub(p.Now).Round(time.Second), MaxDeliverDelay)
		}
		if len(ep.Deliveries) > MaxHandlersPerEvent {
			return invalidf("publish: event %q has %d deliveries, over the limit of %d", ep.Event.ID, len(ep.Deliveries), MaxHandlersPerEvent)
		}
		handlers := make(map[string]struct{}, len(ep.Deliveries))
		for _, d := range ep.Deliveries {
			if err := ValidateName("handler name", d.Handler); err != nil {
				return err
			}
			if _, dup := handlers[d.Handler]; dup {
				return invalidf("publish: event %q lists handler %q twice", ep.Event.ID, d.Handler)
			}
			handlers[d.Handler] = struct{}{}
			if err := checkAttempts(d.MaxAttempts); err != nil {
				return err
			}
		}
	}
	return nil
}

// Validate checks p. The owner and handler names of params built by a
// Bus's dispatcher were checked once, at Start, and are not checked again.
func (p *DeliveryClaimParams) Validate() error {
	if p == nil {
		return invalidf("claim params are nil")
	}
	if !p.namesValidated.holds(p) {
		if err := p.validateNames(); err != nil {
			return err
		}
	}
	if p.Limit < 1 || p.Limit > MaxClaimLimit {
		return invalidf("claim: limit %d out of range [1, %d]", p.Limit, MaxClaimLimit)
	}
	if p.LeaseDuration <= 0 || p.LeaseDuration > MaxLeaseDuration {
		return invalidf("claim: lease duration %v out of range (0, %v]", p.LeaseDuration, MaxLeaseDuration)
	}
	if err := p.validateKeyRuns(); err != nil {
		return err
	}
	return checkNow(p.Now)
}

// validateKeyRuns checks p.KeyRuns: handlers of the claim, each once, and
// a Max in [1, MaxKeyRun].
func (p *DeliveryClaimParams) validateKeyRuns() error {
	if len(p.KeyRuns) == 0 {
		return nil
	}
	if len(p.KeyRuns) > len(p.Handlers) {
		return invalidf("claim: %d key runs for %d handlers", len(p.KeyRuns), len(p.Handlers))
	}
	for i, r := range p.KeyRuns {
		if r.Max < 1 || r.Max > MaxKeyRun {
			return invalidf("claim: key run of handler %q: max %d out of range [1, %d]", r.Handler, r.Max, MaxKeyRun)
		}
		found := false
		for _, h := range p.Handlers {
			if h == r.Handler {
				found = true
				break
			}
		}
		if !found {
			return invalidf("claim: key run of handler %q, which the claim does not ask for", r.Handler)
		}
		for _, o := range p.KeyRuns[:i] {
			if o.Handler == r.Handler {
				return invalidf("claim: two key runs of handler %q", r.Handler)
			}
		}
	}
	return nil
}

// validateNames checks the owner and the handler names of p.
func (p *DeliveryClaimParams) validateNames() error {
	if err := ValidateName("lease owner", p.Owner); err != nil {
		return err
	}
	if len(p.Handlers) == 0 {
		return invalidf("claim: no handlers")
	}
	for _, h := range p.Handlers {
		if err := ValidateName("handler name", h); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks p.
func (p *LeaseExtendParams) Validate() error {
	if p == nil {
		return invalidf("extend params are nil")
	}
	if err := ValidateName("lease owner", p.Owner); err != nil {
		return err
	}
	if err := checkLeases(p.Leases); err != nil {
		return err
	}
	if err := checkNow(p.Now); err != nil {
		return err
	}
	if !p.ExpiresAt.After(p.Now) {
		return invalidf("extend: expiry %v is not after now %v", p.ExpiresAt, p.Now)
	}
	if d := p.ExpiresAt.Sub(p.Now); d > MaxLeaseDuration {
		return invalidf("extend: expiry %v is %v after now %v, more than MaxLeaseDuration (%v)", p.ExpiresAt, d, p.Now, MaxLeaseDuration)
	}
	return nil
}

// Validate checks p.
func (p *DeliveryCompleteParams) Validate() error {
	if p == nil {
		return invalidf("complete params are nil")
	}
	return checkLeaseNow(p.Lease, p.Now)
}

// Validate checks p.
func (p *DeliveryCompleteManyParams) Validate() error {
	if p == nil {
		return invalidf("complete params are nil")
	}
	if err := checkLeases(p.Leases); err != nil {
		return err
	}
	return checkNow(p.Now)
}

// Validate checks p.
func (p *DeliveryRescheduleParams) Validate() error {
	if p == nil {
		return invalidf("reschedule params are nil")
	}
	if err := checkLease(p.Lease); err != nil {
		return err
	}
	if p.AvailableAt.IsZero() {
		return invalidf("reschedule: available time is zero")
	}
	return checkNow(p.Now)
}

// Validate checks p.
func (p *DeliveryBuryParams) Validate() error {
	if p == nil {
		return invalidf("bury params are nil")
	}
	return checkLeaseNow(p.Lease, p.Now)
}

// Validate checks p.
func (p *DeliveryReleaseParams) Validate() error {
	if p == nil {
		return invalidf("release params are nil")
	}
	return checkLeaseNow(p.Lease, p.Now)
}

// Validate checks p.
func (p *OwnerRelinquishParams) Validate() error {
	if p == nil {
		return invalidf("relinquish params are nil")
	}
	if err := ValidateName("lease owner", p.Owner); err != nil {
		return err
	}
	return checkNow(p.Now)
}

// Validate checks p.
func (p *DeliveryRequeueParams) Validate() error {
	if p == nil {
		return invalidf("requeue params are nil")
	}
	if p.DeliveryID == "" {
		return invalidf("requeue: delivery id is empty")
	}
	return checkNow(p.Now)
}

// Validate checks p and returns the page size to use.
func (p *DeliveryListParams) Validate() (limit int, err error) {
	if p == nil {
		return 0, invalidf("list params are nil")
	}
	if p.Status != "" && !p.Status.Valid() {
		return 0, invalidf("list: unknown status %q", p.Status)
	}
	if p.Limit < 0 || p.Limit > MaxListLimit {
		return 0, invalidf("list: limit %d out of range [0, %d]", p.Limit, MaxListLimit)
	}
	if p.Limit == 0 {
		return DefaultListLimit, nil
	}
	return p.Limit, nil
}

// Validate checks p.
func (p *StatisticsParams) Validate() error {
	if p == nil {
		return invalidf("statistics params are nil")
	}
	return checkNow(p.Now)
}

// Validate checks p.
func (p *PurgeParams) Validate() error {
	if p == nil {
		return invalidf("purge params are nil")
	}
	if p.Limit < 0 {
		return invalidf("purge: negative limit %d", p.Limit)
	}
	return checkNow(p.Now)
}

// checkLease checks that l names a delivery and a token.
func checkLease(l relaytype.Lease) error {
	if l.DeliveryID == "" {
		return invalidf("lease: delivery id is empty")
	}
	if l.Token == "" {
		return invalidf("lease: token is empty")
	}
	return nil
}

func checkLeases(leases []relaytype.Lease) error {
	if len(leases) == 0 {
		return invalidf("no leases")
	}
	if len(leases) > MaxLeasesPerCall {
		return invalidf("%d leases, over the limit of %d", len(leases), MaxLeasesPerCall)
	}
	for _, l := range leases {
		if err := checkLease(l); err != nil {
			return err
		}
	}
	return nil
}

// checkLeaseNow checks the lease and the time of a single-lease write.
func checkLeaseNow(l relaytype.Lease, now time.Time) error {
	if err := checkLease(l); err != nil {
		return err
	}
	return checkNow(now)
}

func checkAttempts(n int) error {
	if n < 1 || n > MaxAttemptsLimit {
		return invalidf("max attempts %d out of range [1, %d]", n, MaxAttemptsLimit)
	}
	return nil
}

func checkNow(now time.Time) error {
	if now.IsZero() {
		return invalidf("now is zero")
	}
	return nil
}

// TruncateError cuts an error text to MaxErrorBytes on a UTF-8 boundary.
func TruncateError(s string) string {
	if len(s) <= MaxErrorBytes {
		return s
	}
	s = s[:MaxErrorBytes]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// invalidf returns an error wrapping relaytype.ErrInvalid whose text
// starts with "relaybus: ", as the Bus's own are.
func invalidf(format string, args ...any) error { return check.Invalidf(format, args...) }

// Validate checks p: its completions and its claim.
func (p *DeliveryCompleteClaimParams) Validate() error {
	if p == nil {
		return invalidf("complete and claim params are nil")
	}
	if err := p.Complete.Validate(); err != nil {
		return err
	}
	return p.Claim.Validate()
}
