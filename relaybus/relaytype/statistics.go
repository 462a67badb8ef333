package relaytype

import "time"

// Counts are delivery counts per status.
type Counts struct {
	Pending    int64
	Processing int64
	Completed  int64
	Dead       int64
}

// Statistics describe the deliveries of a store.
type Statistics struct {
	Counts
	// Handlers has the counts of each handler that has deliveries.
	Handlers map[string]Counts
	// OldestDueAge is how long the oldest due pending delivery has been
	// due at the time the statistics were asked for (0 when none is due).
	OldestDueAge time.Duration
}
