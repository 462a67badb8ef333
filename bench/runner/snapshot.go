package runner

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
	"github.com/berkcansavur/relaybus/bench/validate"
)

// The bloat cells' server side (scenarios 8 and 9): a snapshot held
// open through the window, and samples of the side's tables.

// BloatServer is what the bloat cells need of the Server beyond Server
// itself. PGServer is one; a Server that is not cannot run those cells
// (their windows fail with an error saying so).
type BloatServer interface {
	// Hold opens a session on the window database that holds a snapshot
	// of kind (scenarios.HoldRepeatableRead, HoldLongQuery) for at most
	// d, and returns once it holds it.
	Hold(ctx context.Context, dsn, kind string, d time.Duration) (Held, error)
	// Tables samples the window database's tables (pgmetrics.ReadTableSizes).
	Tables(ctx context.Context, dsn string) (result.TablePoint, error)
}

// Held is a held snapshot.
type Held interface {
	// Check reports whether the holding session has a backend_xmin now,
	// and its age.
	Check(ctx context.Context) (age int64, held bool, err error)
	// Release ends the hold (its transaction, or its statement) and the
	// session; a second call does nothing.
	Release(ctx context.Context) error
}

// holdSettle bounds the wait for a long query's session to show its
// snapshot (pg_stat_activity's backend_xmin).
const holdSettle = 10 * time.Second

// Hold implements BloatServer.
func (s *PGServer) Hold(ctx context.Context, dsn, kind string, d time.Duration) (Held, error) {
	connect := func() (*pgx.Conn, error) {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("runner: %w", err)
		}
		cfg.RuntimeParams["application_name"] = "relaybus-bench-hold"
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, fmt.Errorf("runner: hold: connecting to the window database: %w", err)
		}
		return conn, nil
	}
	h := &pgHold{kind: kind}
	var err error
	if h.conn, err = connect(); err != nil {
		return nil, err
	}
	if h.monitor, err = connect(); err != nil {
		h.conn.Close(ctx)
		return nil, err
	}
	h.pid = h.conn.PgConn().PID()
	fail := func(err error) (Held, error) {
		_ = h.Release(ctx)
		return nil, err
	}
	switch kind {
	case scenarios.HoldRepeatableRead:
		// The transaction's snapshot is taken by its first query, not by
		// BEGIN; it is kept until the transaction ends.
		if _, err := h.conn.Exec(ctx, pgmetrics.HarnessTag+" BEGIN ISOLATION LEVEL REPEATABLE READ"); err != nil {
			return fail(fmt.Errorf("runner: hold: %w", err))
		}
		var n int64
		if err := h.conn.QueryRow(ctx, pgmetrics.HarnessTag+" SELECT count(*) FROM pg_class").Scan(&n); err != nil {
			return fail(fmt.Errorf("runner: hold: taking the snapshot: %w", err))
		}
	case scenarios.HoldLongQuery:
		// A statement keeps its snapshot while it runs; pg_sleep in a
		// SELECT runs for the whole of d unless cancelled (Release).
		h.done = make(chan error, 1)
		go func() {
			_, err := h.conn.Exec(context.WithoutCancel(ctx), pgmetrics.HarnessTag+" SELECT pg_sleep($1)", d.Seconds())
			h.done <- err
		}()
		// Held once the session sleeps inside the statement with its
		// snapshot: a backend_xmin alone also shows while pgx prepares
		// the statement (Parse and Describe read the catalogs under a
		// snapshot), a round trip before it executes, and a hold that
		// returned then was seen without a backend_xmin by the next
		// Check (TestHoldKeepsDeadTuples, once in CI).
		deadline := time.Now().Add(holdSettle)
		for {
			if held, err := h.sleeping(ctx); err != nil {
				return fail(err)
			} else if held {
				break
			}
			if time.Now().After(deadline) {
				return fail(fmt.Errorf("runner: hold: the long query showed no backend_xmin within %s", holdSettle))
			}
			select {
			case err := <-h.done:
				h.done <- err
				return fail(fmt.Errorf("runner: hold: the long query ended before it held a snapshot: %v", err))
			case <-time.After(10 * time.Millisecond):
			}
		}
	default:
		return fail(fmt.Errorf("runner: hold: unknown kind %q", kind))
	}
	return h, nil
}

// pgHold is a held snapshot: conn holds it, monitor watches and cancels.
type pgHold struct {
	kind          string
	conn, monitor *pgx.Conn
	pid           uint32
	done          chan error // the long query's end

	once sync.Once
	err  error
}

// Check implements Held.
func (h *pgHold) Check(ctx context.Context) (int64, bool, error) {
	return pgmetrics.BackendXminAge(ctx, h.monitor, h.pid)
}

// sleeping reports whether the long query's session is inside its
// pg_sleep with a backend_xmin.
func (h *pgHold) sleeping(ctx context.Context) (bool, error) {
	var held bool
	err := h.monitor.QueryRow(ctx, pgmetrics.HarnessTag+` SELECT coalesce(wait_event = 'PgSleep' AND backend_xmin IS NOT NULL, false)
		FROM pg_stat_activity WHERE pid = $1`, int64(h.pid)).Scan(&held)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("runner: hold: reading the long query's session: %w", err)
	}
	return held, nil
}

// Release implements Held.
func (h *pgHold) Release(ctx context.Context) error {
	h.once.Do(func() {
		ctx := context.WithoutCancel(ctx)
		switch {
		case h.done != nil:
			if _, err := h.monitor.Exec(ctx, pgmetrics.HarnessTag+" SELECT pg_cancel_backend($1)", int64(h.pid)); err != nil {
				h.err = fmt.Errorf("runner: hold: cancelling the long query: %w", err)
			}
			select {
			case err := <-h.done:
				var pe *pgconn.PgError
				if err != nil && !(errors.As(err, &pe) && pe.Code == "57014") { // query_canceled
					h.err = errors.Join(h.err, fmt.Errorf("runner: hold: the long query: %w", err))
				}
			case <-time.After(holdSettle):
				h.err = errors.Join(h.err, fmt.Errorf("runner: hold: the long query did not end within %s of its cancel", holdSettle))
			}
		default:
			if _, err := h.conn.Exec(ctx, pgmetrics.HarnessTag+" ROLLBACK"); err != nil {
				h.err = fmt.Errorf("runner: hold: ending the transaction: %w", err)
			}
		}
		h.conn.Close(ctx)
		h.monitor.Close(ctx)
	})
	return h.err
}

// Tables implements BloatServer.
func (s *PGServer) Tables(ctx context.Context, dsn string) (result.TablePoint, error) {
	var p result.TablePoint
	err := withConn(ctx, dsn, func(conn *pgx.Conn) error {
		var err error
		p, err = pgmetrics.ReadTableSizes(ctx, conn)
		return err
	})
	return p, err
}

// holdMargin: a long query sleeps this much past the window, so it is
// still running when the window ends and Release cancels it.
const holdMargin = time.Minute

// bloatWindow is the bloat part of a window: its hold and its sampler.
type bloatWindow struct {
	w       *windowRun
	held    Held
	sampler *tableSampler
	b       *result.Bloat
}

// startBloat opens the cell's hold and starts its sampler, just before
// the window's clock starts at t0 (the caller's next line); nil for a
// cell that does neither.
func (w *windowRun) startBloat(ctx context.Context, t0 time.Time) (*bloatWindow, error) {
	c := w.c
	if c.Hold == scenarios.HoldNone && c.SampleEvery <= 0 {
		return nil, nil
	}
	bs, ok := w.step.Server.(BloatServer)
	if !ok {
		return nil, fmt.Errorf("runner: cell %q holds a snapshot or samples tables, which this server cannot (not a BloatServer)", c.Name)
	}
	bw := &bloatWindow{w: w, b: &result.Bloat{Hold: c.Hold, StepMs: int(c.SampleEvery / time.Millisecond)}}
	w.sample.Bloat = bw.b
	if c.Hold != scenarios.HoldNone {
		held, err := bs.Hold(ctx, w.dsn, c.Hold, c.WindowIn(w.step.Window)+holdMargin)
		if err != nil {
			bw.b.HoldError = err.Error()
			return nil, err
		}
		bw.held = held
		if _, ok, err := held.Check(ctx); err != nil || !ok {
			bw.release(ctx)
			bw.b.HoldError = fmt.Sprintf("the %s session had no backend_xmin at the window's start (%v)", c.Hold, err)
			return nil, fmt.Errorf("runner: hold: %s", bw.b.HoldError)
		}
	}
	if c.SampleEvery > 0 {
		bw.sampler = startSampler(ctx, func(ctx context.Context) (result.TablePoint, error) { return bs.Tables(ctx, w.dsn) },
			c.SampleEvery, t0, nil)
	}
	return bw, nil
}

// end stops the sampler (its last sample) and checks that the hold still
// held, then releases it: the window's end. A hold that no longer held
// fails the window.
func (bw *bloatWindow) end(ctx context.Context) error {
	if bw == nil {
		return nil
	}
	var errs []error
	if bw.sampler != nil {
		pts, err := bw.sampler.stop(ctx)
		bw.b.Tables = pts
		if err != nil {
			errs = append(errs, err)
		}
	}
	if bw.held != nil {
		age, ok, err := bw.held.Check(ctx)
		bw.b.HoldXmin, bw.b.HoldXminAgeEnd = ok && err == nil, age
		if err != nil || !ok {
			bw.b.HoldError = fmt.Sprintf("the %s session had no backend_xmin at the window's end (%v)", bw.b.Hold, err)
			errs = append(errs, fmt.Errorf("runner: hold: %s", bw.b.HoldError))
		}
		if err := bw.release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// release releases the hold, if any, once (the window's end, and the
// deferred call of a window that failed before it).
func (bw *bloatWindow) release(ctx context.Context) error {
	if bw == nil || bw.held == nil {
		return nil
	}
	h := bw.held
	bw.held = nil
	return h.Release(ctx)
}

// finish adds the steps from the records and the bloat metrics to the
// sample, once the window's records are read.
func (bw *bloatWindow) finish(in *validate.Input, win span) {
	if bw == nil || bw.w.c.SampleEvery <= 0 {
		return
	}
	c := bw.w.c
	bw.b.Steps = bloatSteps(in, win, c.SampleEvery, c.PublisherProcs > 0 && c.DispatcherProcs > 0)
	for k, v := range bw.b.Metrics() {
		bw.w.sample.Metrics[k] = v
	}
}
