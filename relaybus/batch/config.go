package batch

import (
	"errors"
	"fmt"
	"time"
)

// Limits on every Config field. New and NewPerKey refuse a config outside
// them, so a typo (a Linger of 5h instead of 5ms, a MaxQueued of 1e12)
// fails at construction instead of as memory exhaustion later.
const (
	// MaxSizeLimit bounds Config.MaxSize: items in one batch.
	MaxSizeLimit = 1 << 16
	// MaxWeightLimit bounds Config.MaxWeight and any one item's weight.
	MaxWeightLimit = int64(1) << 40
	// LingerLimit bounds Config.Linger.
	LingerLimit = time.Hour
	// MaxInFlightLimit bounds Config.MaxInFlight: concurrent batches.
	MaxInFlightLimit = 4096
	// MaxQueuedLimit bounds Config.MaxQueued: items waiting, all keys.
	MaxQueuedLimit = 1 << 24
	// MaxQueuedWeightLimit bounds Config.MaxQueuedWeight.
	MaxQueuedWeightLimit = int64(1) << 50
)

// FullPolicy says what Submit does when the queue bounds are reached.
type FullPolicy int

const (
	// Block waits until there is room, the caller's context ends or the
	// batcher closes. It is the zero value, so the default.
	Block FullPolicy = iota
	// Reject fails at once with ErrFull.
	Reject
)

func (p FullPolicy) String() string {
	switch p {
	case Block:
		return "Block"
	case Reject:
		return "Reject"
	}
	return fmt.Sprintf("FullPolicy(%d)", int(p))
}

// Config configures New and NewPerKey. Zero is out of range for the
// counts, so a config is either built from DefaultConfig or spelled out;
// nothing is silently defaulted.
type Config[In any] struct {
	// MaxSize closes a batch when it holds this many items.
	// Range [1, MaxSizeLimit].
	MaxSize int
	// MaxWeight closes a batch before its weight (the sum of Weigh over
	// its items) would exceed it; a batch always takes at least one item.
	// 0 means no weight bound. Range [0, MaxWeightLimit]; needs Weigh.
	MaxWeight int64
	// Weigh returns an item's weight, in [0, MaxWeightLimit]. Optional:
	// without it every item weighs 0 and the weight bounds must be 0.
	Weigh func(In) int64
	// Linger is how long the oldest waiting item may wait for more to
	// join its batch; then the batch is due even if not full. 0 makes
	// every item due at once (batches still form while workers are busy).
	// Range [0, LingerLimit].
	Linger time.Duration
	// MaxInFlight is how many batches may run at once. For NewPerKey
	// these workers are shared by all keys, one batch per key at most.
	// Range [1, MaxInFlightLimit].
	MaxInFlight int
	// MaxQueued bounds items waiting (admitted, not yet in a running
	// batch) across all keys. Range [1, MaxQueuedLimit].
	MaxQueued int
	// MaxQueuedWeight bounds the weight of waiting items across all keys.
	// 0 means no weight bound. Range [0, MaxQueuedWeightLimit]; needs Weigh.
	MaxQueuedWeight int64
	// WhenFull says whether Submit blocks (default) or fails with ErrFull
	// when MaxQueued or MaxQueuedWeight would be exceeded.
	WhenFull FullPolicy
}

// PerKeyConfig configures NewPerKey. The fields mean what they mean for
// New, except that MaxInFlight workers are shared by all keys and each
// key has at most one batch in flight.
type PerKeyConfig[In any] = Config[In]

// DefaultConfig returns the documented defaults: batches of up to 100
// items, a 2ms linger, 8 batches in flight, 10,000 items queued, Block.
func DefaultConfig[In any]() Config[In] {
	return Config[In]{
		MaxSize:     100,
		Linger:      2 * time.Millisecond,
		MaxInFlight: 8,
		MaxQueued:   10_000,
		WhenFull:    Block,
	}
}

// Errors returned by Submit and Close. Errors returned by the batch
// function reach its callers unchanged.
var (
	// ErrClosed: the batcher was closed before the item was admitted, or
	// Close's context ended before the item's batch finished.
	ErrClosed = errors.New("batch: closed")
	// ErrFull: the queue bounds were reached and WhenFull is Reject.
	ErrFull = errors.New("batch: queue full")
	// ErrWeight: Weigh returned a weight that no batch or queue can hold.
	ErrWeight = errors.New("batch: item weight out of range")
	// ErrResultCount: the batch function returned a different number of
	// results than it was given items.
	ErrResultCount = errors.New("batch: result count mismatch")
)

// PanicError is what each caller of a batch gets when the batch function
// panics: the panic is recovered so one bad batch cannot take the
// process, and the others, down.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("batch: batch function panicked: %v", e.Value)
}

func (c *Config[In]) validate() error {
	for _, err := range []error{
		inRange("MaxSize", c.MaxSize, 1, MaxSizeLimit),
		inRange("MaxWeight", c.MaxWeight, 0, MaxWeightLimit),
		inRange("Linger", c.Linger, 0, LingerLimit),
		inRange("MaxInFlight", c.MaxInFlight, 1, MaxInFlightLimit),
		inRange("MaxQueued", c.MaxQueued, 1, MaxQueuedLimit),
		inRange("MaxQueuedWeight", c.MaxQueuedWeight, 0, MaxQueuedWeightLimit),
	} {
		if err != nil {
			return err
		}
	}
	if c.WhenFull != Block && c.WhenFull != Reject {
		return fmt.Errorf("batch: WhenFull %v is neither Block nor Reject", c.WhenFull)
	}
	if c.Weigh == nil && (c.MaxWeight != 0 || c.MaxQueuedWeight != 0) {
		// Without Weigh every item weighs 0, so a weight bound would
		// silently never apply.
		return errors.New("batch: MaxWeight and MaxQueuedWeight need Weigh")
	}
	return nil
}

// inRange reports a field outside [lo, hi], in the field's own units.
func inRange[T int | int64 | time.Duration](name string, v, lo, hi T) error {
	if v < lo || v > hi {
		return fmt.Errorf("batch: %s %v out of range [%v, %v]", name, v, lo, hi)
	}
	return nil
}

// maxItemWeight is the heaviest item that can ever be admitted: one that
// fits both a batch and the queue on its own.
func (c *Config[In]) maxItemWeight() int64 {
	m := MaxWeightLimit
	if c.MaxWeight > 0 && c.MaxWeight < m {
		m = c.MaxWeight
	}
	if c.MaxQueuedWeight > 0 && c.MaxQueuedWeight < m {
		m = c.MaxQueuedWeight
	}
	return m
}
