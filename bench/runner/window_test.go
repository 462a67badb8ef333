package runner

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/scenarios"
)

// idleWorker is a worker that has already exited, for tests of the
// process list alone.
type idleWorker struct{ done chan struct{} }

func (idleWorker) Name() string { return "idle" }
func (idleWorker) WaitReady(context.Context) (*protocol.Message, error) {
	return &protocol.Message{Ignored: []string{"x"}}, nil
}
func (idleWorker) Stop(time.Duration)                              {}
func (idleWorker) Kill()                                           {}
func (w idleWorker) Exited() <-chan struct{}                       { return w.done }
func (idleWorker) Counters() *protocol.Counters                    { return nil }
func (idleWorker) Wait(context.Context) (*protocol.Message, error) { return nil, nil }

// TestProcessListOfWorkersStartedConcurrently runs workers of one
// window to their end from several goroutines at once, as scenario 6's base starts
// its two preloads: every one must be in the process list. An unguarded
// append lost one in CI (b-preload-keyed.rec was "written by no process
// the manifest lists", and the upgrade was INVALID).
func TestProcessListOfWorkersStartedConcurrently(t *testing.T) {
	done := make(chan struct{})
	close(done)
	launch := func(string, protocol.Config, string) (Worker, error) { return idleWorker{done}, nil }
	w := &windowRun{step: &Step{Launch: launch}, c: &scenarios.Cell{}, side: &Side{}, sample: &result.Sample{},
		dir: t.TempDir(), phases: newPhases()}
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				cfg := w.config(protocol.RolePreload, fmt.Sprintf("p-%d-%d", g, i), 1)
				if _, err := w.runOnce(t.Context(), cfg); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if n := len(w.sample.Ignored); n != goroutines*each {
		t.Errorf("the sample lists %d ignored settings; the workers reported %d", n, goroutines*each)
	}
	procs := w.processes(t.Context())
	if len(procs) != goroutines*each {
		t.Fatalf("the process list holds %d workers; %d were started", len(procs), goroutines*each)
	}
	seen := map[string]bool{}
	for _, p := range procs {
		seen[p.Name] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("the process list names %d distinct workers; %d were started", len(seen), goroutines*each)
	}
}
