package relaytype

import "time"

// Counts are delivery counts per status, and the age of the oldest
// delivery waiting.
type Counts struct {
	Pending    int64
	Processing int64
	Completed  int64
	Dead       int64
	// OldestDueAge is how long the oldest due pending delivery (one not
	// in flight) has been due at the time the statistics were asked for;
	// 0 when none is due.
	OldestDueAge time.Duration
}

// Statistics describe the deliveries of a store: the counts of all of
// them (their OldestDueAge is the oldest of every handler's), and of each
// handler.
type Statistics struct {
	Counts
	// Handlers has the counts of each handler that has deliveries.
	Handlers map[string]Counts
}
