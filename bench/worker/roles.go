package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/driver"
	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

type pgxTx = pgx.Tx

// keyStatesFunc reads the store's per-key state for role inspect; nil
// where the worker cannot (the Inspect then says the keys were not
// reported).
type keyStatesFunc func(ctx context.Context) (keys []protocol.KeyState, truncated bool, err error)

func runRole[TTx any](ctx context.Context, w *worker, st driver.Store[TTx], keys keyStatesFunc) error {
	return w.RunRole(ctx, workerkit.Roles{
		Setup: st.Setup,
		Inspect: func(ctx context.Context) (*protocol.Inspect, error) {
			in, err := inspect(ctx, st)
			if err != nil || keys == nil {
				return in, err
			}
			if in.Keys, in.KeysTruncated, err = keys(ctx); err != nil {
				return nil, fmt.Errorf("worker: inspect: key states: %w", err)
			}
			in.KeysReported = true
			return in, nil
		},
		Publish:  func(ctx context.Context) error { return publish(ctx, w, st) },
		Dispatch: func(ctx context.Context) error { return dispatch(ctx, w, st) },
	})
}

func inspect[TTx any](ctx context.Context, st driver.Store[TTx]) (*protocol.Inspect, error) {
	now := time.Now()
	stats, err := st.Statistics(ctx, &driver.StatisticsParams{Now: now})
	if err != nil {
		return nil, err
	}
	in := &protocol.Inspect{
		Pending: stats.Pending, Processing: stats.Processing,
		Completed: stats.Completed, Dead: stats.Dead,
	}
	after := ""
	for {
		page, err := st.DeliveryList(ctx, &driver.DeliveryListParams{
			Status: relaytype.StatusDead, Limit: driver.MaxListLimit, After: after,
		})
		if err != nil {
			return nil, err
		}
		for _, d := range page.Deliveries {
			if len(in.DeadLetters) == protocol.MaxDeadLetters {
				in.DeadLettersTruncated = true
				return in, nil
			}
			in.DeadLetters = append(in.DeadLetters, protocol.DeadLetter{
				EventID: d.EventID, Handler: d.Handler, Attempts: d.Attempts, Error: d.LastError,
			})
		}
		if page.Next == "" {
			return in, nil
		}
		after = page.Next
	}
}

// recorder serialises record writes from many goroutines; each Flush is
// one write(2).
type recorder struct {
	mu sync.Mutex
	w  *record.Writer
}

func (r *recorder) flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w.Flush()
}

func (r *recorder) counters(c *protocol.Counters) {
	r.mu.Lock()
	defer r.mu.Unlock()
	workerkit.RecordCounters(r.w, c)
}

func (w *worker) workloadHandlerOptions() *relaybus.HandlerOptions {
	return &relaybus.HandlerOptions{MaxAttempts: w.Cfg.Workload.MaxAttempts}
}

// batchOptions are the options of the workload's handlers registered as
// batch handlers of up to maxSize deliveries a call.
func (w *worker) batchOptions(maxSize, calls int) *relaybus.BatchOptions {
	return &relaybus.BatchOptions{HandlerOptions: *w.workloadHandlerOptions(), MaxSize: maxSize, MaxCalls: calls}
}
