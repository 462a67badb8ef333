package main

// Running a claim's deliveries: per-key runs in sequence order, the
// handler stub the workload asks for, and the records of what ran.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// handle runs a claim's deliveries: each unkeyed delivery on its own,
// each (handler, key)'s in sequence order one after the other (stopping
// at a failure or at one not due), on up to workers goroutines. Every
// handle is recorded; the caller flushes the records before the
// completions are sent.
func (s *stream) handle(claims []delivery, xid int64) outcome {
	d := s.d
	tokens := map[int16]string{}
	for i := range claims {
		c := &claims[i]
		if tokens[c.lane] == "" {
			tokens[c.lane] = leaseToken(c.lane, xid)
		}
		c.token = tokens[c.lane]
	}
	runs := d.runsOf(claims)
	results := make([]outcome, len(runs))
	n := min(d.workers, len(runs))
	if n <= 1 {
		for i, r := range runs {
			results[i] = d.runOne(r)
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(runs) {
						return
					}
					results[i] = d.runOne(runs[i])
				}
			}()
		}
		wg.Wait()
	}
	var out outcome
	for _, r := range results {
		out.done = append(out.done, r.done...)
		out.failures = append(out.failures, r.failures...)
		out.buried += r.buried
		out.released += r.released
	}
	return out
}

// runsOf groups claims (sorted by cut when keyed) into runs: one per
// unkeyed delivery, one per (handler, key) whose head is due.
func (d *dispatcher) runsOf(claims []delivery) [][]delivery {
	var runs [][]delivery
	if !d.keyed {
		for i := range claims {
			runs = append(runs, claims[i:i+1])
		}
		return runs
	}
	for i := 0; i < len(claims); {
		j := i + 1
		for j < len(claims) && claims[j].handler == claims[i].handler && claims[j].key == claims[i].key {
			j++
		}
		runs = append(runs, claims[i:j])
		i = j
	}
	return runs
}

// runOne runs one run in order, stopping at the first failure (a key's
// later deliveries wait for its head) or the first delivery not due.
func (d *dispatcher) runOne(run []delivery) outcome {
	var out outcome
	for i := range run {
		c := &run[i]
		if !c.due {
			out.released += len(run) - i
			return out
		}
		ok, f := d.handleOne(c)
		if ok {
			out.done = append(out.done, completion{ctid: c.ctid, eventID: c.eventID, handler: c.handler,
				attempt: c.attempts + 1, token: c.token})
			continue
		}
		out.failures = append(out.failures, f)
		if f.dead {
			out.buried++
		}
		if d.keyed {
			out.released += len(run) - i - 1
			return out
		}
	}
	return out
}

// handleOne is the workload's handler for one delivery, and its record.
func (d *dispatcher) handleOne(c *delivery) (bool, failure) {
	start := time.Now()
	if d.cost > 0 {
		spin(d.cost)
	}
	if d.extra > 0 {
		spin(d.extra)
	}
	attempt := c.attempts + 1
	poison := len(c.payload) > 0 && c.payload[0] == protocol.PayloadPoison
	fail := poison || attempt <= d.failFirst
	end := time.Now()
	err := d.rec.AddHandled(record.Handled{
		EventID: c.eventID, Handler: c.handler, Key: c.key, Sequence: c.sequence,
		Attempt: attempt, HandleNs: start.UnixNano(), OK: !fail,
		EndNs: end.UnixNano(), Holder: d.w.Cfg.Name, Token: c.token,
	})
	if errors.Is(err, record.ErrBatchFull) {
		if err = d.rec.Flush(); err == nil {
			err = d.rec.AddHandled(record.Handled{
				EventID: c.eventID, Handler: c.handler, Key: c.key, Sequence: c.sequence,
				Attempt: attempt, HandleNs: start.UnixNano(), OK: !fail,
				EndNs: end.UnixNano(), Holder: d.w.Cfg.Name, Token: c.token,
			})
		}
	}
	if err != nil {
		// Nothing of this claim is completed: the record may be lost.
		d.fatal(fmt.Errorf("ceiling: recording delivery %d: %w", c.id, err))
		fail = true
	}
	if !fail {
		d.counters.handled.Add(1)
		return true, failure{}
	}
	d.counters.failed.Add(1)
	f := failure{id: c.id, dead: attempt >= c.maxAttempts,
		err: fmt.Sprintf("planted failure (poison=%v, attempt %d)", poison, attempt)}
	if !f.dead {
		f.delayUs = d.schedule.Delay(attempt, rand.Float64()).Microseconds()
	}
	return false, f
}

// recordCompletions writes a completion line for each delivery whose
// completion committed; they reach the kernel with the next claim's
// handles or when the record file is closed (a kill may lose the last
// ones: they bound from below what was completed).
func (d *dispatcher) recordCompletions(done []completion) {
	now := time.Now().UnixNano()
	for _, c := range done {
		rc := record.Completed{EventID: c.eventID, Handler: c.handler, Attempt: c.attempt, Token: c.token, CompletedNs: now}
		err := d.rec.AddCompleted(rc)
		if errors.Is(err, record.ErrBatchFull) {
			if err = d.rec.Flush(); err == nil {
				err = d.rec.AddCompleted(rc)
			}
		}
		if err != nil {
			d.w.Log.Error("ceiling: recording a completion", "error", err)
		}
	}
}

// leaseToken names the claim a handle ran under: the lane and the id of
// the transaction that held it. Two claims never share a transaction, so
// a token is run once.
func leaseToken(lane int16, xid int64) string {
	return strconv.Itoa(int(lane)) + ":" + strconv.FormatInt(xid, 10)
}

func failureArgs(fs []failure) (ids, delays []int64, dead []bool, errs []string) {
	for _, f := range fs {
		ids, delays, dead, errs = append(ids, f.id), append(delays, f.delayUs), append(dead, f.dead), append(errs, f.err)
	}
	return ids, delays, dead, errs
}

// spin busy-waits for d: a handler cost that uses CPU like real work
// does, and that a sleep's timer granularity would not reproduce.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}
