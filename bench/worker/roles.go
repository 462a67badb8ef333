package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
	"github.com/berkcansavur/relaybus/relaybus"
)

type pgxTx = pgx.Tx

func runRole[TTx any](ctx context.Context, w *worker, st relaybus.Store[TTx]) error {
	switch w.cfg.Role {
	case protocol.RoleSetup:
		w.ready()
		if err := st.Setup(ctx); err != nil {
			return err
		}
		w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: &protocol.Counters{}})
		return nil
	case protocol.RoleInspect:
		w.ready()
		in, err := inspect(ctx, st)
		if err != nil {
			return err
		}
		w.out.emit(&protocol.Message{Type: protocol.TypeDone, Counters: &protocol.Counters{}, Inspect: in})
		return nil
	case protocol.RolePreload, protocol.RolePublisher:
		return publish(ctx, w, st)
	case protocol.RoleDispatcher:
		return dispatch(ctx, w, st)
	}
	return fmt.Errorf("worker: unknown role %q", w.cfg.Role)
}

func inspect[TTx any](ctx context.Context, st relaybus.Store[TTx]) (*protocol.Inspect, error) {
	now := time.Now()
	stats, err := st.Statistics(ctx, &relaybus.StatisticsParams{Now: now})
	if err != nil {
		return nil, err
	}
	in := &protocol.Inspect{
		Pending: stats.Pending, Processing: stats.Processing,
		Completed: stats.Completed, Dead: stats.Dead,
	}
	after := ""
	for {
		page, err := st.DeliveryList(ctx, &relaybus.DeliveryListParams{
			Status: relaybus.StatusDead, Limit: relaybus.MaxListLimit, After: after,
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
	bytes, writes, spent := r.w.Stats()
	r.mu.Unlock()
	c.RecordBytes, c.RecordWrites, c.RecordNs = bytes, writes, spent.Nanoseconds()
}

func (w *worker) workloadHandlerOptions() *relaybus.HandlerOptions {
	return &relaybus.HandlerOptions{MaxAttempts: w.cfg.Workload.MaxAttempts}
}
