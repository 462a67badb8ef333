package relaybus

import (
	"context"
	"fmt"
	"time"
)

// Completing successes: in batches (DeliveryCompleteMany) or one at a
// time, after Config.BeforeComplete has seen them.

// completeOne completes one delivery alone (completion batching disabled).
func (d *dispatcher[TTx]) completeOne(j *job) {
	if !d.beforeComplete([]*job{j}) {
		return
	}
	now := d.cfg.Now()
	var ok bool
	werr := d.write(func(c context.Context) (e error) {
		ok, e = d.store.DeliveryComplete(c, &DeliveryCompleteParams{Lease: j.d.Lease(), Now: now})
		return e
	})
	d.done(j, "complete", ok, werr, &d.stats.completed)
}

// beforeComplete calls Config.BeforeComplete; on its error the deliveries are
// released (they were handled but not recorded, so they must run again).
func (d *dispatcher[TTx]) beforeComplete(js []*job) bool {
	if d.cfg.BeforeComplete == nil {
		return true
	}
	ds := make([]*Delivery, len(js))
	for i, j := range js {
		ds[i] = j.d
	}
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("relaybus: BeforeComplete panicked: %v", p)
			}
		}()
		return d.cfg.BeforeComplete(d.writeCtx, ds)
	}()
	if err == nil {
		return true
	}
	d.log.Error("relaybus: BeforeComplete failed; releasing the batch", "deliveries", len(js), "error", err)
	for _, j := range js {
		d.release(j)
	}
	return false
}

// completer groups successes into DeliveryCompleteMany calls: a batch is sent
// when CompletionBatchWindow has passed since its first delivery or when it
// has CompletionBatchMax deliveries. While a batch is being sent the next
// one fills up in the channel, so batches grow with the store's latency.
func (d *dispatcher[TTx]) completer() {
	var batch []*job
	var timer *time.Timer
	var timerC <-chan time.Time
	flush := func() {
		if timer != nil {
			timer.Stop()
			timerC = nil
		}
		if len(batch) > 0 {
			d.completeMany(batch)
			batch = nil
		}
	}
	for {
		select {
		case j, ok := <-d.completions:
			if !ok {
				flush()
				return
			}
			batch = append(batch, j)
			if len(batch) >= d.cfg.CompletionBatchMax {
				flush()
			} else if len(batch) == 1 {
				if timer == nil {
					timer = time.NewTimer(d.cfg.CompletionBatchWindow)
				} else {
					timer.Reset(d.cfg.CompletionBatchWindow)
				}
				timerC = timer.C
			}
		case <-timerC:
			timerC = nil
			flush()
		}
	}
}

func (d *dispatcher[TTx]) completeMany(js []*job) {
	if !d.beforeComplete(js) {
		return
	}
	leases := make([]Lease, len(js))
	for i, j := range js {
		leases[i] = j.d.Lease()
	}
	now := d.cfg.Now()
	var oks []bool
	werr := d.write(func(c context.Context) (e error) {
		oks, e = d.store.DeliveryCompleteMany(c, &DeliveryCompleteManyParams{Leases: leases, Now: now})
		return e
	})
	if werr == nil && len(oks) != len(js) {
		werr = fmt.Errorf("relaybus: store returned %d results for %d completions", len(oks), len(js))
	}
	for i, j := range js {
		d.done(j, "complete", werr == nil && oks[i], werr, &d.stats.completed)
	}
}
