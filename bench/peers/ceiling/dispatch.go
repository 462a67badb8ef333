package main

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// Dispatcher bounds.
const (
	// roundTripTimeout bounds one round trip of a stream. A stopped
	// worker lets its round trip finish rather than cancel it mid-commit.
	roundTripTimeout = time.Minute
	// errorBackoffMin and errorBackoffMax bound the wait after a failed
	// round trip (doubling), before the stream reconnects.
	errorBackoffMin = 50 * time.Millisecond
	errorBackoffMax = 2 * time.Second
	// statsFlushInterval: how often a stream sends a commit in a round
	// trip of its own, so that its backend, then outside a transaction
	// block, flushes its statistics; PostgreSQL flushes them at most once
	// a second (PGSTAT_MIN_INTERVAL) anyway.
	statsFlushInterval = time.Second
)

// The statements of a claim stream. A lane is held by the row lock of
// lockSQL until the transaction ends; the claim reads the locked lanes'
// due deliveries; the completion deletes the claim's successes and
// records its failures, and commits, in the same round trip as the next
// claim's BEGIN, lock and read.
//
// lockSQL is a statement of its own, before the claim: under READ
// COMMITTED a statement's snapshot is taken when it starts, and a lane
// whose last holder committed after that could still be locked by it,
// with the holder's deletes invisible to it. The claim, the next
// statement, takes its snapshot after the lock was granted, so after the
// last holder's commit. The lanes go from one to the other in a
// transaction-local setting, so that both are sent in one round trip.
//
// lockSQL: $1 the ring position (lanes >= $1, ascending), $2 how many.
// Only lanes with work are locked; a lane another stream holds is
// skipped, never waited for. It returns the lanes and the transaction's
// id (0 when it locked none, so that an idle poll takes no xid).
const lockSQLFormat = `
SELECT coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::smallint[],
	set_config('ceiling.lanes', coalesce(array_agg(x.lane ORDER BY x.lane), '{}')::text, true),
	CASE WHEN count(*) > 0 THEN txid_current() ELSE 0 END
FROM (
	SELECT l.lane FROM ceiling_lanes l
	WHERE l.lane >= $1 AND EXISTS (SELECT 1 FROM ceiling_deliveries d WHERE d.lane = l.lane AND %s)
	ORDER BY l.lane
	LIMIT $2
	FOR UPDATE SKIP LOCKED
) x`

// Work in a lane: a due pending delivery, unkeyed or keyed. A due keyed
// one may be behind a head waiting for its retry, and then the claim
// runs nothing of its key; a lane whose only keyed deliveries are heads
// waiting for their retries is not locked at all.
const (
	unkeyedWork = `d.status = 'pending' AND d.key IS NULL AND d.available_at <= now()`
	keyedWork   = `d.status = 'pending' AND d.key IS NOT NULL AND d.available_at <= now()`
)

// claimUnkeyedSQL: per locked lane, up to $1 due unkeyed deliveries,
// oldest first (the lane index, in order), with their events' payloads.
const claimUnkeyedSQL = `
SELECT d.ctid, d.id, d.event_id, d.handler, ''::text, 0::bigint, d.attempts, d.max_attempts, d.lane, true, e.payload
FROM unnest(current_setting('ceiling.lanes')::smallint[]) AS l(lane)
CROSS JOIN LATERAL (
	SELECT d.ctid, d.id, d.event_id, d.handler, d.attempts, d.max_attempts, d.lane FROM ceiling_deliveries d
	WHERE d.lane = l.lane AND d.status = 'pending' AND d.key IS NULL AND d.available_at <= now()
	ORDER BY d.available_at, d.id
	LIMIT $1
) d
JOIN ceiling_events e ON e.id = d.event_id`

// claimKeyedSQL: per locked lane, its first $1 pending keyed deliveries
// in (handler, key, sequence) order: for each (handler, key) a prefix of
// its pending deliveries, starting with its head. The caller runs a
// prefix whose head is due, in sequence order, one at a time, and stops
// at a failure; the lane is held meanwhile, so nothing else of the key
// runs anywhere (the per-key rule: a keyed delivery runs only when no
// lower sequence of its handler and key is pending).
const claimKeyedSQL = `
SELECT d.ctid, d.id, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.lane,
	d.available_at <= now(), e.payload
FROM unnest(current_setting('ceiling.lanes')::smallint[]) AS l(lane)
CROSS JOIN LATERAL (
	SELECT d.ctid, d.id, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.lane, d.available_at
	FROM ceiling_deliveries d
	WHERE d.lane = l.lane AND d.status = 'pending' AND d.key IS NOT NULL
	ORDER BY d.handler, d.key, d.sequence
	LIMIT $1
) d
JOIN ceiling_events e ON e.id = d.event_id`

// completeSQL deletes the claim's successes by address: the claim read
// them in this transaction, under the lanes' locks, and nothing else
// writes a pending delivery of a locked lane, so their addresses hold
// (a TID scan, whatever the statistics).
const completeSQL = `DELETE FROM ceiling_deliveries WHERE ctid = ANY ($1::tid[])`

// failSQL records failed attempts: attempts + 1, the error, and either
// the retry's due time ($2 µs from now) or status dead ($3).
const failSQL = `
UPDATE ceiling_deliveries AS d SET
	attempts = d.attempts + 1,
	last_error = u.err,
	updated_at = clock_timestamp(),
	available_at = CASE WHEN u.dead THEN d.available_at ELSE clock_timestamp() + u.delay_us * interval '1 microsecond' END,
	status = CASE WHEN u.dead THEN 'dead' ELSE 'pending' END
FROM unnest($1::bigint[], $2::bigint[], $3::bool[], $4::text[]) AS u(id, delay_us, dead, err)
WHERE d.id = u.id`

// dispatch plays the dispatcher: its streams connect, then run until ctx
// is done; each finishes its claim (handles, completes, commits) and
// stops.
func dispatch(ctx context.Context, w *worker, connCfg *pgx.ConnConfig) error {
	d, err := dispatcherFor(w, connCfg)
	if err != nil {
		return err
	}
	d.rec, err = record.Create(w.Cfg.RecordPath)
	if err != nil {
		return err
	}
	streams := make([]*stream, d.streams)
	offset := ringOffset(w.Cfg.Name)
	for i := range streams {
		s := &stream{d: d, index: i, start: int16((offset + i*laneCount/d.streams) % laneCount), ask: 1, ranSinceWrap: true}
		if s.conn, err = pgx.ConnectConfig(ctx, connCfg.Copy()); err != nil {
			for _, o := range streams[:i] {
				o.conn.Close(context.Background())
			}
			return fmt.Errorf("ceiling: connecting stream %d: %w", i, err)
		}
		streams[i] = s
	}
	w.Log.Info("ceiling dispatcher started", "streams", d.streams, "batch", d.batch, "max_lanes", d.maxLanes,
		"workers_per_stream", d.workers, "poll", d.poll, "keyed", d.keyed)
	w.Ready()
	tickStop := make(chan struct{})
	go w.Tick(tickStop, func() { w.Out.Emit(&protocol.Message{Type: protocol.TypeCounters, Counters: d.snapshot()}) })

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-d.fatalCh:
			stop()
		case <-runCtx.Done():
		}
	}()
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(runCtx)
			s.conn.Close(context.Background())
		}()
	}
	wg.Wait()
	close(tickStop)
	closeErr := d.rec.Close()
	if err := d.failed(); err != nil {
		return err
	}
	if closeErr != nil {
		return fmt.Errorf("ceiling: closing records: %w", closeErr)
	}
	w.Out.Emit(&protocol.Message{Type: protocol.TypeDone, Counters: d.snapshot()})
	return nil
}

// ringOffset spreads the ring positions of different processes.
func ringOffset(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % laneCount)
}

// stream is one claim stream: a connection and its position on the ring
// of lanes.
type stream struct {
	d     *dispatcher
	index int
	conn  *pgx.Conn
	start int16 // the ring position: the next claim looks at lanes >= start
	ask   int   // lanes the next claim asks for
	// idleAt is when the stream's backend last waited outside a
	// transaction block (see statsFlushInterval).
	idleAt time.Time
	// ranSinceWrap: a claim ran something since the position last went
	// back to 0; a whole turn that ran nothing waits for the poll.
	ranSinceWrap bool
}

// run claims, handles and completes until ctx is done. Every round trip
// but the first ends the previous claim's transaction (its completions
// and failures, then COMMIT; ROLLBACK when it wrote nothing) and, unless
// the stream is stopping, begins the next one: BEGIN, lock, claim.
func (s *stream) run(ctx context.Context) {
	d := s.d
	var (
		prev    outcome
		inTx    bool
		backoff = errorBackoffMin
	)
	for {
		stopping := ctx.Err() != nil
		end := &pgx.Batch{} // the previous claim's writes and its COMMIT
		writes := len(prev.done) + len(prev.failures)
		if inTx {
			if len(prev.done) > 0 {
				ctids := make([]pgtype.TID, len(prev.done))
				for i := range prev.done {
					ctids[i] = prev.done[i].ctid
				}
				end.Queue(completeSQL, ctids)
			}
			if len(prev.failures) > 0 {
				ids, delays, dead, errs := failureArgs(prev.failures)
				end.Queue(failSQL, ids, delays, dead, errs)
			}
			if writes > 0 {
				end.Queue("COMMIT")
			} else {
				end.Queue("ROLLBACK")
			}
		}
		var (
			lanes  []int16
			xid    int64
			claims []delivery
		)
		next := &pgx.Batch{} // the next claim
		if !stopping {
			next.Queue("BEGIN")
			next.Queue(d.lockSQL, s.start, s.ask).QueryRow(func(row pgx.Row) error {
				var setting string
				return row.Scan(&lanes, &setting, &xid)
			})
			perLane := (d.batch + s.ask - 1) / s.ask
			next.Queue(d.claimSQL, perLane).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var c delivery
					if err := rows.Scan(&c.ctid, &c.id, &c.eventID, &c.handler, &c.key, &c.sequence,
						&c.attempts, &c.maxAttempts, &c.lane, &c.due, &c.payload); err != nil {
						return err
					}
					claims = append(claims, c)
				}
				return rows.Err()
			})
		}
		if end.Len()+next.Len() == 0 {
			return
		}
		// Both in one round trip, except about once a second, when the
		// commit goes alone: a backend flushes its statistics
		// (pg_stat_user_tables, pg_stat_wal) only when it waits for a
		// query outside a transaction block, which a stream that always
		// begins its next claim in the same round trip never does; the
		// harness's per-table metrics would read nothing of this side.
		var endErr, nextErr error
		switch {
		case end.Len() == 0:
			nextErr = s.send(ctx, next)
		case next.Len() == 0 || time.Since(s.idleAt) >= statsFlushInterval:
			endErr = s.send(ctx, end)
			s.idleAt = time.Now()
			if endErr == nil && next.Len() > 0 {
				nextErr = s.send(ctx, next)
			}
		default:
			end.QueuedQueries = append(end.QueuedQueries, next.QueuedQueries...)
			endErr = s.send(ctx, end)
			nextErr = endErr
		}
		if endErr != nil {
			// The transaction's outcome is unknown: its deliveries, handled
			// and recorded, may run again (see CapabilityNoFaults).
			d.w.Log.Warn("round trip failed", "stream", s.index, "error", endErr, "completions_unknown", len(prev.done))
			prev, inTx = outcome{}, false
			if !s.recover(ctx, &backoff) {
				return
			}
			continue
		}
		if inTx && writes > 0 {
			d.recordCompletions(prev.done)
			d.counters.completed.Add(int64(len(prev.done)))
			d.counters.buried.Add(int64(prev.buried))
			d.counters.rescheduled.Add(int64(len(prev.failures) - prev.buried))
		}
		if inTx {
			d.counters.released.Add(int64(prev.released))
		}
		if nextErr != nil {
			d.w.Log.Warn("claim failed", "stream", s.index, "error", nextErr)
			prev, inTx = outcome{}, false
			if !s.recover(ctx, &backoff) {
				return
			}
			continue
		}
		backoff = errorBackoffMin
		prev, inTx = outcome{}, !stopping
		if stopping {
			return
		}
		d.counters.claims.Add(1)
		claims = s.cut(claims)
		wrapped := s.move(lanes, claims)
		d.counters.claimed.Add(int64(len(claims)))
		if len(claims) > 0 {
			prev = s.handle(claims, xid)
			err := d.rec.Flush()
			if err == nil {
				err = d.failed()
			}
			if err != nil {
				// The completions must not be sent without their records.
				d.fatal(fmt.Errorf("ceiling: writing records: %w", err))
				_, _ = s.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
				return
			}
		}
		if len(prev.done)+len(prev.failures) > 0 {
			s.ranSinceWrap = true
			continue // the next round trip commits
		}
		// Nothing ran: hold no lane while looking elsewhere or waiting.
		d.counters.released.Add(int64(prev.released))
		prev, inTx = outcome{}, false
		if _, err := s.conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
			d.w.Log.Warn("rollback failed", "stream", s.index, "error", err)
			if !s.recover(ctx, &backoff) {
				return
			}
			continue
		}
		s.idleAt = time.Now()
		if !wrapped {
			continue
		}
		// A whole turn of the ring ran nothing: wait for the poll.
		idle := !s.ranSinceWrap
		s.ranSinceWrap = false
		if idle {
			select {
			case <-ctx.Done():
			case <-time.After(d.poll):
			}
		}
	}
}

// send runs one batch in one round trip. A stopped worker lets it finish
// rather than cancel it mid-commit.
func (s *stream) send(ctx context.Context, b *pgx.Batch) error {
	rtCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), roundTripTimeout)
	defer cancel()
	return s.conn.SendBatch(rtCtx, b).Close()
}

// recover waits out the backoff and reconnects; false when ctx ended.
func (s *stream) recover(ctx context.Context, backoff *time.Duration) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(*backoff):
		}
		*backoff = min(*backoff*2, errorBackoffMax)
		s.conn.Close(context.Background())
		conn, err := pgx.ConnectConfig(ctx, s.d.connCfg.Copy())
		if err == nil {
			s.conn = conn
			return true
		}
		s.d.w.Log.Warn("reconnect failed", "stream", s.index, "error", err)
	}
}

// cut keeps at most batch deliveries. Keyed ones are sorted by (lane,
// handler, key, sequence) first, so that what is kept of each key is a
// prefix of what the claim read, itself a prefix of the key's pending
// deliveries.
func (s *stream) cut(claims []delivery) []delivery {
	if s.d.keyed {
		slices.SortFunc(claims, func(a, b delivery) int {
			return cmp.Or(cmp.Compare(a.lane, b.lane), cmp.Compare(a.handler, b.handler),
				cmp.Compare(a.key, b.key), cmp.Compare(a.sequence, b.sequence))
		})
	}
	if len(claims) > s.d.batch {
		claims = claims[:s.d.batch]
	}
	return claims
}

// move sets the ring position and the lanes of the next claim: past the
// last lane taken (back to 0 when the lanes up to 255 did not give what
// was asked); as many lanes as filled this claim when it was full, twice
// as many (up to maxLanes) when every lane asked for was taken and the
// claim was still short.
// It reports whether the position went back to 0.
func (s *stream) move(lanes []int16, claims []delivery) (wrapped bool) {
	if len(lanes) < s.ask || lanes[len(lanes)-1] == laneCount-1 {
		s.start, wrapped = 0, true
	} else {
		s.start = lanes[len(lanes)-1] + 1
	}
	switch {
	case len(claims) >= s.d.batch:
		used := map[int16]bool{}
		for _, c := range claims {
			used[c.lane] = true
		}
		s.ask = max(1, len(used))
	case len(lanes) == s.ask:
		s.ask = min(s.ask*2, s.d.maxLanes)
	}
	return wrapped
}
