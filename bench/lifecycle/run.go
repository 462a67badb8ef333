package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// Limits and pauses of one ref's run.
const (
	// handlerCost is how long the one handler call takes: long enough
	// that the harness sees the claim before the completion starts.
	handlerCost = time.Second
	// countersEvery is how often the dispatcher reports its counters.
	countersEvery = 20 * time.Millisecond
	// stepTimeout bounds each step (a role, the claim, the completion,
	// the sessions' end).
	stepTimeout = 2 * time.Minute
	// stopTimeout is how long the dispatcher may take to stop.
	stopTimeout = 30 * time.Second
	// pollEvery is how often the harness looks at counters and sessions.
	pollEvery = 5 * time.Millisecond
)

// Workload is the one event: one handler, no key, the scenarios' payload.
var Workload = protocol.Workload{EventType: "bench.event", Handlers: []string{"noop"}, Keys: "none",
	PayloadBytes: 128, IDPrefix: "lifecycle-", HandlerCostUs: int(handlerCost / time.Microsecond)}

// Config is one ref's run.
type Config struct {
	Ref, SHA, Version string
	// Bin is the ref's bench binary (its worker).
	Bin string
	// DSN is a fresh, empty database, as a superuser (pageinspect).
	DSN string
	// Dir receives the workers' logs and record files.
	Dir string
	// Logf prints progress; nil is silent.
	Logf func(format string, args ...any)
}

// Run runs one ref's delivery and reads what it left behind.
func Run(ctx context.Context, c Config) (*Report, error) {
	logf := c.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	pcfg, err := pgx.ParseConfig(c.DSN)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: %w", err)
	}
	pcfg.RuntimeParams["application_name"] = "relaybus-bench-lifecycle"
	conn, err := pgx.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("lifecycle: connecting: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	r := &Report{Ref: c.Ref, SHA: c.SHA, Version: c.Version, Marks: map[string]uint64{}}
	mark := func(step string) error {
		x, err := nextXid(ctx, conn)
		if step == "" {
			r.End = x
		} else {
			r.Marks[step] = x
		}
		return err
	}
	cfg := func(role string) protocol.Config {
		cfg := protocol.Config{Protocol: 1, Role: role, Name: role, CountersIntervalMs: int(countersEvery / time.Millisecond),
			Store: protocol.Store{Kind: "postgres", DSN: c.DSN, PoolSize: 2}, Workload: Workload}
		if role != protocol.RoleSetup {
			cfg.RecordPath = filepath.Join(c.Dir, role+".rec")
		}
		return cfg
	}

	if err := mark(StepSetup); err != nil {
		return nil, err
	}
	logf("  %s: setup", c.Ref)
	if err := runRole(ctx, c, cfg(protocol.RoleSetup)); err != nil {
		return nil, err
	}
	if r.Autovacuum, err = autovacuumOff(ctx, conn); err != nil {
		return nil, err
	}

	if err := mark(StepPublish); err != nil {
		return nil, err
	}
	logf("  %s: publish one event with one handler", c.Ref)
	pre := cfg(protocol.RolePreload)
	pre.Publisher = protocol.Publisher{Publishers: 1, Batch: 1, Events: 1}
	if err := runRole(ctx, c, pre); err != nil {
		return nil, err
	}

	if err := mark(StepClaim); err != nil {
		return nil, err
	}
	logf("  %s: dispatch (the handler takes %s)", c.Ref, handlerCost)
	disp := cfg(protocol.RoleDispatcher)
	disp.Dispatcher = protocol.Dispatcher{Concurrency: 1, Batch: 1, PollMs: 50}
	p, err := proc.Start(c.Bin, disp, filepath.Join(c.Dir, "dispatcher.log"))
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	if err := waitCounters(ctx, p, "the claim", func(k *protocol.Counters) bool { return k.Claimed >= 1 }); err != nil {
		return nil, err
	}
	if err := mark(StepComplete); err != nil {
		return nil, err
	}
	// Read after the mark: if the handle record is not there yet, the
	// completion (which follows it) had not begun when the mark was read.
	if f, err := record.ReadFile(disp.RecordPath); err == nil {
		r.ClaimApart = len(f.Handled) == 0
	}
	if err := waitCounters(ctx, p, "the completion", func(k *protocol.Counters) bool { return k.Completed >= 1 }); err != nil {
		return nil, err
	}
	if err := mark(StepStop); err != nil {
		return nil, err
	}
	logf("  %s: stop the dispatcher", c.Ref)
	p.Stop(stopTimeout)
	if _, err := p.Wait(ctx); err != nil {
		return nil, err
	}
	if err := checkRecords(pre.RecordPath, disp.RecordPath); err != nil {
		return nil, err
	}
	if err := pgmetrics.WaitSessionsGone(ctx, conn, stepTimeout); err != nil {
		return nil, err
	}
	if err := mark(""); err != nil {
		return nil, err
	}
	logf("  %s: read the pages", c.Ref)
	if err := read(ctx, conn, r); err != nil {
		return nil, err
	}
	return r, nil
}

// runRole runs a role to its end.
func runRole(ctx context.Context, c Config, cfg protocol.Config) error {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	p, err := proc.Start(c.Bin, cfg, filepath.Join(c.Dir, cfg.Name+".log"))
	if err != nil {
		return err
	}
	defer p.Kill()
	if _, err := p.Wait(ctx); err != nil {
		return fmt.Errorf("lifecycle: %s: %w", cfg.Role, err)
	}
	return nil
}

// waitCounters waits until the dispatcher's counters satisfy ok.
func waitCounters(ctx context.Context, p *proc.Proc, what string, ok func(*protocol.Counters) bool) error {
	deadline := time.Now().Add(stepTimeout)
	for {
		if k := p.Counters(); k != nil && ok(k) {
			return nil
		}
		select {
		case <-p.Exited():
			_, err := p.Wait(ctx)
			return fmt.Errorf("lifecycle: the dispatcher exited before %s: %v", what, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lifecycle: no %s within %s (counters %+v)", what, stepTimeout, p.Counters())
		}
	}
}

// checkRecords: one event published, one delivery handled once, ok.
func checkRecords(pubPath, dispPath string) error {
	pub, err := record.ReadFile(pubPath)
	if err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	disp, err := record.ReadFile(dispPath)
	if err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	if len(pub.Published) != 1 || len(disp.Handled) != 1 || !disp.Handled[0].OK ||
		disp.Handled[0].EventID != pub.Published[0].EventID {
		return fmt.Errorf("lifecycle: want one event published and its delivery handled once, ok; got %d published, %d handled",
			len(pub.Published), len(disp.Handled))
	}
	return nil
}

// autovacuumOff turns autovacuum off on every relaybus table (the
// server-wide setting does not cover a server given by DSN) and says how
// it is off.
func autovacuumOff(ctx context.Context, conn *pgx.Conn) (string, error) {
	var server string
	if err := conn.QueryRow(ctx, harnessTag+"SHOW autovacuum").Scan(&server); err != nil {
		return "", fmt.Errorf("lifecycle: %w", err)
	}
	rows, err := conn.Query(ctx, harnessTag+`SELECT c.oid::regclass::text FROM pg_class c
		WHERE c.relkind = 'r' AND c.relname LIKE 'relaybus\_%' AND pg_table_is_visible(c.oid) ORDER BY 1`)
	if err != nil {
		return "", fmt.Errorf("lifecycle: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("lifecycle: %w", err)
	}
	if len(tables) == 0 {
		return "", errors.New("lifecycle: the setup created no relaybus_ table")
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, harnessTag+"ALTER TABLE "+t+" SET (autovacuum_enabled = false)"); err != nil {
			return "", fmt.Errorf("lifecycle: %w", err)
		}
	}
	return fmt.Sprintf("server autovacuum=%s; autovacuum_enabled=false on the %d relaybus tables after the setup", server, len(tables)), nil
}
