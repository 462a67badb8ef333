package relaybus

import "github.com/berkcansavur/relaybus/relaybus/relaytype"

// The types of the Bus's admin calls: ListDeliveries, Statistics and
// PurgeExpired.

// DeliveryListParams filter and page ListDeliveries. Zero values do not
// filter.
type DeliveryListParams struct {
	Status  Status
	Handler string
	Key     string
	EventID string
	// Limit is the page size: 0 means DefaultListLimit, at most
	// MaxListLimit.
	Limit int
	// After is the Next of the previous page, or empty for the first.
	After string
}

// DeliveryListResult is one page of ListDeliveries.
type DeliveryListResult struct {
	Deliveries []*Delivery
	// Next is the cursor of the next page; empty on the last page.
	Next string
}

// Statistics describe the deliveries of a store (Bus.Statistics): the
// Counts of each status, overall and per handler, each with how long its
// oldest due delivery has waited. It names relaytype.Statistics, which
// the store fills.
type Statistics = relaytype.Statistics

// Counts are delivery counts per status, and the age of the oldest due
// delivery waiting (relaytype.Counts).
type Counts = relaytype.Counts

// PurgeResult reports what PurgeExpired deleted.
type PurgeResult struct {
	Deliveries int64
	Events     int64
}
