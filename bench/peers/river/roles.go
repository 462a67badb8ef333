package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
	"github.com/berkcansavur/relaybus/bench/worker/workerkit/workerpg"
)

// ApplicationName tags this worker's PostgreSQL sessions, so that they
// can be told from the harness's and from a relaybus worker's in
// pg_stat_activity.
const ApplicationName = "relaybus-bench-river"

// jobKind is the kind of every job this peer inserts and works.
const jobKind = "relaybus_bench_delivery"

// deliveryArgs is one (event, handler): one River job. The short JSON
// names keep the job row small; the payload is the event's.
type deliveryArgs struct {
	EventID string `json:"e"`
	Handler string `json:"h"`
	Key     string `json:"k,omitempty"`
	Payload string `json:"p"`
}

// Kind implements river.JobArgs.
func (deliveryArgs) Kind() string { return jobKind }

// run opens the pool and plays the role.
func (w *worker) run(ctx context.Context) error {
	pool, err := workerpg.OpenPool(ctx, "river", &w.Cfg.Store, ApplicationName, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	return w.RunRole(ctx, workerkit.Roles{
		Setup:    func(ctx context.Context) error { return setup(ctx, pool, w.Log) },
		Inspect:  func(ctx context.Context) (*protocol.Inspect, error) { return inspect(ctx, pool, w.riverLogger()) },
		Publish:  func(ctx context.Context) error { return publish(ctx, w, pool) },
		Dispatch: func(ctx context.Context) error { return dispatch(ctx, w, pool) },
	})
}

// riverLogger is the logger River's client gets: stderr like ours, at
// warn level, since River logs every maintenance step at info.
func (w *worker) riverLogger() *slog.Logger {
	h := slog.NewTextHandler(w.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})
	return slog.New(h).With("worker", w.Cfg.Name, "role", w.Cfg.Role, "component", "river")
}

// setup runs River's migrations up to the newest version this River
// release has. Migrations take River's own lock, so they are idempotent.
func setup(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: log})
	if err != nil {
		return fmt.Errorf("river: migrator: %w", err)
	}
	res, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("river: migrate: %w", err)
	}
	log.Info("migrated", "versions_applied", len(res.Versions))
	return nil
}

// inspect counts River's jobs by state and lists the dead ones.
func inspect(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (*protocol.Inspect, error) {
	in := &protocol.Inspect{}
	rows, err := pool.Query(ctx, `SELECT state::text, count(*) FROM river_job GROUP BY state`)
	if err != nil {
		return nil, fmt.Errorf("river: counting jobs: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (stateCount, error) {
		var sc stateCount
		err := row.Scan(&sc.state, &sc.n)
		return sc, err
	})
	if err != nil {
		return nil, fmt.Errorf("river: counting jobs: %w", err)
	}
	for _, sc := range counts {
		switch rivertype.JobState(sc.state) {
		case rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable, rivertype.JobStatePending:
			in.Pending += sc.n
		case rivertype.JobStateRunning:
			in.Processing += sc.n
		case rivertype.JobStateCompleted:
			in.Completed += sc.n
		case rivertype.JobStateDiscarded, rivertype.JobStateCancelled:
			in.Dead += sc.n
		default:
			// A state a newer River added: count it as pending, so that
			// the harness never calls a store drained that is not.
			log.Warn("unknown job state counted as pending", "state", sc.state, "jobs", sc.n)
			in.Pending += sc.n
		}
	}
	if in.Dead == 0 {
		return in, nil
	}

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: log})
	if err != nil {
		return nil, fmt.Errorf("river: client: %w", err)
	}
	params := river.NewJobListParams().
		States(rivertype.JobStateDiscarded, rivertype.JobStateCancelled).
		Kinds(jobKind).
		First(deadLetterPage)
	for {
		page, err := client.JobList(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("river: listing dead jobs: %w", err)
		}
		for _, j := range page.Jobs {
			if len(in.DeadLetters) == protocol.MaxDeadLetters {
				in.DeadLettersTruncated = true
				return in, nil
			}
			var a deliveryArgs
			if err := json.Unmarshal(j.EncodedArgs, &a); err != nil {
				return nil, fmt.Errorf("river: job %d has args this peer did not write: %w", j.ID, err)
			}
			dl := protocol.DeadLetter{EventID: a.EventID, Handler: a.Handler, Attempts: j.Attempt}
			if n := len(j.Errors); n > 0 {
				dl.Error = j.Errors[n-1].Error
			}
			in.DeadLetters = append(in.DeadLetters, dl)
		}
		if len(page.Jobs) < deadLetterPage {
			return in, nil
		}
		params = params.After(page.LastCursor)
	}
}

// deadLetterPage is the page size of the dead letter listing (River's
// JobList allows at most 10,000).
const deadLetterPage = 10_000

type stateCount struct {
	state string
	n     int64
}
