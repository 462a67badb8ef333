package worker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/berkcansavur/relaybus/relaybus"
)

// The batch handler waits once per call and applies each delivery in
// order, each span starting where the previous one ended (so a key's
// records never overlap); a keyed batch stops at its first failure, an
// unkeyed one goes on.
func TestBatchHandler(t *testing.T) {
	type span struct {
		seq        int64
		start, end time.Time
	}
	var spans []span
	apply := func(d *relaybus.Delivery, start time.Time) (bool, error) {
		spans = append(spans, span{d.Sequence, start, time.Now()})
		if d.Attempts == 0 {
			return true, errors.New("planted")
		}
		return false, nil
	}
	ds := func(attempts ...int) []*relaybus.Delivery {
		out := make([]*relaybus.Delivery, len(attempts))
		for i, a := range attempts {
			out[i] = &relaybus.Delivery{Sequence: int64(i + 1), Attempts: a}
		}
		return out
	}
	fn := batchHandler(apply, 2*time.Millisecond)
	begin := time.Now()
	require.Nil(t, fn(context.Background(), "k", ds(1, 1, 1)))
	require.Len(t, spans, 3)
	require.GreaterOrEqual(t, spans[0].end.Sub(begin), 2*time.Millisecond, "the first span holds the call's wait")
	for i := 1; i < len(spans); i++ {
		require.False(t, spans[i].start.Before(spans[i-1].end), "span %d starts before span %d ended", i, i-1)
	}
	require.Less(t, spans[2].end.Sub(begin), 50*time.Millisecond, "one wait per call, not per delivery")

	spans = nil
	errs := fn(context.Background(), "k", ds(1, 0, 1))
	require.Len(t, errs, 3)
	require.NoError(t, errs[0])
	require.Error(t, errs[1])
	require.Len(t, spans, 2, "a keyed batch stops at its first failure")

	spans = nil
	errs = fn(context.Background(), "", ds(0, 1, 0))
	require.Len(t, spans, 3, "an unkeyed batch goes on past a failure")
	require.Error(t, errs[0])
	require.NoError(t, errs[1])
	require.Error(t, errs[2])
}
