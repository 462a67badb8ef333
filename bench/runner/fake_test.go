package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/berkcansavur/relaybus/bench/pgmetrics"
	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// fakeCluster is an in-process stand-in for a PostgreSQL server and the
// worker processes of one side: a store per database (a queue of
// deliveries) and workers that play their roles against it and write
// real record files. It lets the measurement step run without a
// database or a process.
type fakeCluster struct {
	mu       sync.Mutex
	dbs      map[string]*fakeDB
	restarts int
	crashes  int
	// misbehave names a worker ("disp-0") and what it does wrong:
	// "exit" (fails mid-window), "stubborn" (ignores Stop), "idle"
	// (never handles anything), "twice" (handles every delivery twice),
	// "lazy" (still starting until someone waits for its ready line, and
	// killed without a done line by a Stop before that, as a process is
	// by a SIGTERM before it sets up its handler),
	// "hang" (a setup that never ends), "errors" (a publisher whose calls
	// fail now and then), "cut" (a dispatcher that leaves a partial
	// record line behind), "crash-exit" (a dispatcher that fails when
	// the server crashes after it started).
	misbehave map[string]string
	// handleEvery is the pause of a fake dispatcher between deliveries. It
	// bounds what a window can handle whatever the machine's speed: at
	// 200µs a fast machine handled a test's whole preload inside its window
	// and the runner ran the cell again.
	handleEvery time.Duration
	// events logs "create <db>", "begin <db>" (the window's first
	// snapshot) and "end <db>" (its last), in order.
	events []string
	// configs are the configs of every worker launched, in order.
	configs []protocol.Config
}

func (c *fakeCluster) log(event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, event)
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{dbs: map[string]*fakeDB{}, misbehave: map[string]string{}, handleEvery: time.Millisecond}
}

// fakeDB is one window database: pending deliveries in publish order.
type fakeDB struct {
	mu        sync.Mutex
	pending   []fakeDelivery
	inFlight  int
	dead      []protocol.DeadLetter
	attempts  map[string]int
	walPos    uint64
	handledOK int64
}

// fakeLeaseExpiry is how long after a fake dispatcher is killed its
// delivery in flight is pending again.
const fakeLeaseExpiry = 20 * time.Millisecond

type fakeDelivery struct {
	eventID, handler, key string
	seq                   int64
	poison                bool
}

func (c *fakeCluster) db(dsn string) *fakeDB {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dbs[strings.TrimPrefix(dsn, "fake://")]
}

func (c *fakeCluster) CreateDatabase(_ context.Context, name string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.dbs[name]; ok {
		return "", fmt.Errorf("fake: database %s exists", name)
	}
	c.dbs[name] = &fakeDB{attempts: map[string]int{}}
	c.events = append(c.events, "create "+name)
	return "fake://" + name, nil
}

func (c *fakeCluster) CloneDatabase(_ context.Context, name, template string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	src, ok := c.dbs[template]
	if !ok {
		return "", fmt.Errorf("fake: no template database %s", template)
	}
	if _, ok := c.dbs[name]; ok {
		return "", fmt.Errorf("fake: database %s exists", name)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.inFlight > 0 {
		return "", fmt.Errorf("fake: template %s is in use", template)
	}
	db := &fakeDB{pending: slices.Clone(src.pending), dead: slices.Clone(src.dead), attempts: maps.Clone(src.attempts),
		walPos: src.walPos, handledOK: src.handledOK}
	c.dbs[name] = db
	c.events = append(c.events, "clone "+name+" from "+template)
	return "fake://" + name, nil
}

func (c *fakeCluster) DropDatabase(_ context.Context, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dbs, name)
	return nil
}

func (c *fakeCluster) Restart(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.restarts++
	return nil
}

// Crash counts the crash and logs it; a "crash-exit" dispatcher started
// before it fails.
func (c *fakeCluster) Crash(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashes++
	c.events = append(c.events, "crash")
	return nil
}

func (c *fakeCluster) crashCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashes
}

func (c *fakeCluster) Prepare(context.Context, string) error { return nil }

func (c *fakeCluster) Settle(context.Context, string) error { return nil }

func (c *fakeCluster) Snapshot(_ context.Context, dsn string, checkpoint bool) (*pgmetrics.Snapshot, error) {
	if checkpoint {
		c.log("begin " + strings.TrimPrefix(dsn, "fake://"))
	} else {
		c.log("end " + strings.TrimPrefix(dsn, "fake://"))
	}
	db := c.db(dsn)
	if db == nil {
		return nil, errors.New("fake: no database")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	return &pgmetrics.Snapshot{WALPos: db.walPos, Statements: -1, Tables: map[string]pgmetrics.TableStats{}}, nil
}

func (c *fakeCluster) Probe(_ context.Context, dsn string) (*pgmetrics.Probe, error) {
	db := c.db(dsn)
	if db == nil {
		return nil, errors.New("fake: no database")
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	return &pgmetrics.Probe{WALPos: db.walPos, Tables: map[string]pgmetrics.TableStats{}, FileNodes: map[string]uint32{}}, nil
}

func (c *fakeCluster) launch(_ string, cfg protocol.Config, _ string) (Worker, error) {
	db := c.db(cfg.Store.DSN)
	if db == nil {
		return nil, fmt.Errorf("fake: no database for %s", cfg.Name)
	}
	c.mu.Lock()
	c.configs = append(c.configs, cfg)
	c.mu.Unlock()
	w := &fakeWorker{name: cfg.Name, cfg: cfg, db: db, cluster: c, behaviour: c.misbehave[cfg.Name],
		ready: make(chan struct{}), stop: make(chan struct{}), kill: make(chan struct{}), exited: make(chan struct{}),
		asked: make(chan struct{})}
	go w.run()
	return w, nil
}

// fakeWorker plays one role in a goroutine.
type fakeWorker struct {
	name      string
	cfg       protocol.Config
	db        *fakeDB
	cluster   *fakeCluster
	behaviour string

	ready, stop, kill, exited chan struct{}
	stopOnce, killOnce        sync.Once
	// asked is closed by the first WaitReady ("lazy" workers wait for it).
	asked     chan struct{}
	askedOnce sync.Once

	mu         sync.Mutex
	done       *protocol.Message
	err        error
	killed     bool
	stopKilled bool
	counters   protocol.Counters
}

func (w *fakeWorker) Name() string { return w.name }

func (w *fakeWorker) WaitReady(ctx context.Context) (*protocol.Message, error) {
	w.askedOnce.Do(func() { close(w.asked) })
	select {
	case <-w.ready:
		return &protocol.Message{Type: protocol.TypeReady}, nil
	case <-w.exited:
		return nil, fmt.Errorf("fake: worker %s exited before it was ready", w.name)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (w *fakeWorker) Wait(ctx context.Context) (*protocol.Message, error) {
	select {
	case <-w.exited:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopKilled {
		return w.done, fmt.Errorf("fake: worker %s ignored SIGTERM and was killed", w.name)
	}
	if w.killed {
		return w.done, nil
	}
	return w.done, w.err
}

func (w *fakeWorker) Stop(timeout time.Duration) {
	w.stopOnce.Do(func() { close(w.stop) })
	select {
	case <-w.exited:
	case <-time.After(timeout):
		w.mu.Lock()
		w.stopKilled = true
		w.mu.Unlock()
		w.killOnce.Do(func() { close(w.kill) })
		<-w.exited
	}
}

func (w *fakeWorker) Kill() {
	w.killOnce.Do(func() {
		w.mu.Lock()
		w.killed = true
		w.mu.Unlock()
		close(w.kill)
	})
	<-w.exited
}

func (w *fakeWorker) Exited() <-chan struct{} { return w.exited }

func (w *fakeWorker) Counters() *protocol.Counters {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.counters
	return &c
}

func (w *fakeWorker) finish(done *protocol.Message, err error) {
	w.mu.Lock()
	if err != nil {
		done = &protocol.Message{Type: protocol.TypeDone, Error: err.Error()}
	}
	w.done, w.err = done, err
	w.mu.Unlock()
	close(w.exited)
}

// stopped reports whether the worker should end its loop now.
func (w *fakeWorker) stopped() bool {
	select {
	case <-w.kill:
		return true
	case <-w.stop:
		return w.behaviour != "stubborn"
	default:
		return false
	}
}

func (w *fakeWorker) run() {
	if w.behaviour == "lazy" {
		select {
		case <-w.asked:
		case <-w.stop:
			w.finish(nil, errors.New("fake: terminated before it was ready, without a done line"))
			return
		case <-w.kill:
			w.finish(nil, errors.New("fake: killed before it was ready"))
			return
		}
	}
	close(w.ready)
	var rec *record.Writer
	if w.cfg.RecordPath != "" {
		var err error
		if rec, err = record.Create(w.cfg.RecordPath); err != nil {
			w.finish(nil, err)
			return
		}
		defer rec.Close()
	}
	var err error
	var done = &protocol.Message{Type: protocol.TypeDone}
	switch w.cfg.Role {
	case protocol.RoleSetup:
		if w.behaviour == "hang" {
			<-w.kill
		}
	case protocol.RolePreload, protocol.RolePublisher:
		err = w.publish(rec)
	case protocol.RoleDispatcher:
		err = w.dispatch(rec)
	case protocol.RoleInspect:
		w.db.mu.Lock()
		done.Inspect = &protocol.Inspect{Pending: int64(len(w.db.pending)), Processing: int64(w.db.inFlight),
			Dead: int64(len(w.db.dead)), DeadLetters: append([]protocol.DeadLetter(nil), w.db.dead...)}
		w.db.mu.Unlock()
	}
	w.finish(done, err)
}

func (w *fakeWorker) publish(rec *record.Writer) error {
	wl, pc := w.cfg.Workload, w.cfg.Publisher
	stride := max(pc.Stride, 1)
	for i := int64(0); pc.Events == 0 || i < int64(pc.Events); i++ {
		if w.stopped() {
			break
		}
		idx := pc.StartIndex + i*stride
		id := protocol.EventID(wl.IDPrefix, idx)
		key := protocol.Key(wl.Keys, wl.KeyCount, idx)
		w.db.mu.Lock()
		var seq int64
		if key != "" {
			seq = idx/int64(max(wl.KeyCount, 1)) + 1
		}
		for _, h := range wl.Handlers {
			w.db.pending = append(w.db.pending, fakeDelivery{eventID: id, handler: h, key: key, seq: seq, poison: protocol.IsPoison(idx, wl.PoisonEvery)})
		}
		w.db.walPos += 1000
		w.db.mu.Unlock()
		if err := rec.AddPublished(record.Published{EventID: id, EventType: wl.EventType, Key: key, CommitNs: time.Now().UnixNano()}); err != nil {
			return err
		}
		if err := rec.Flush(); err != nil {
			return err
		}
		w.mu.Lock()
		w.counters.Published++
		if w.behaviour == "errors" && i%50 == 0 {
			w.counters.PublishErrors++
		}
		w.mu.Unlock()
		if w.cfg.Role == protocol.RolePublisher {
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

func (w *fakeWorker) dispatch(rec *record.Writer) error {
	if w.behaviour == "cut" {
		// The last line of the file is cut short, as if the process died
		// mid-write.
		defer func() {
			f, err := os.OpenFile(w.cfg.RecordPath, os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				f.WriteString("H\tpartial")
				f.Close()
			}
		}()
	}
	start := time.Now()
	crashes := w.cluster.crashCount()
	maxAttempts := max(w.cfg.Workload.MaxAttempts, 1)
	for !w.stopped() {
		if w.behaviour == "exit" && time.Since(start) > 50*time.Millisecond {
			return errors.New("fake: dispatcher lost its connection")
		}
		if w.behaviour == "crash-exit" && w.cluster.crashCount() > crashes {
			return errors.New("fake: dispatcher lost its connection in a crash")
		}
		if w.behaviour == "idle" {
			time.Sleep(time.Millisecond)
			continue
		}
		w.db.mu.Lock()
		if len(w.db.pending) == 0 {
			w.db.mu.Unlock()
			time.Sleep(time.Millisecond)
			continue
		}
		d := w.db.pending[0]
		w.db.pending = w.db.pending[1:]
		w.db.inFlight++
		w.db.attempts[d.eventID+"/"+d.handler]++
		attempt := w.db.attempts[d.eventID+"/"+d.handler]
		w.db.mu.Unlock()
		w.mu.Lock()
		w.counters.Claims++
		w.counters.Claimed++
		w.mu.Unlock()

		times := 1
		if w.behaviour == "twice" {
			times = 2
		}
		for range times {
			if err := rec.AddHandled(record.Handled{EventID: d.eventID, Handler: d.handler, Key: d.key, Sequence: d.seq,
				Attempt: attempt, HandleNs: time.Now().UnixNano(), OK: !d.poison}); err != nil {
				return err
			}
		}
		if err := rec.Flush(); err != nil {
			return err
		}
		time.Sleep(w.cluster.handleEvery)
		select {
		case <-w.kill:
			// Killed before the completion: the lease expires later (after
			// the kill is stamped, as a real lease does) and the delivery
			// runs again elsewhere.
			go func() {
				time.Sleep(fakeLeaseExpiry)
				w.db.mu.Lock()
				w.db.inFlight--
				w.db.pending = append([]fakeDelivery{d}, w.db.pending...)
				w.db.mu.Unlock()
			}()
			return nil
		default:
		}
		w.db.mu.Lock()
		w.db.inFlight--
		w.db.walPos += 500
		switch {
		case !d.poison:
			w.db.handledOK++
		case attempt >= maxAttempts:
			w.db.dead = append(w.db.dead, protocol.DeadLetter{EventID: d.eventID, Handler: d.handler, Attempts: attempt})
		default:
			w.db.pending = append(w.db.pending, d)
		}
		w.db.mu.Unlock()
		// Counted as a worker counts: each handle recorded, and a
		// completion once it is done.
		w.mu.Lock()
		if d.poison {
			w.counters.HandlerFailed += int64(times)
		} else {
			w.counters.Handled += int64(times)
			w.counters.Completed++
		}
		w.mu.Unlock()
	}
	return nil
}
