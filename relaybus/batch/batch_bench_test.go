package batch

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// identity returns its items as their results: the cost measured is the
// batcher's, not the batch function's.
func identity(_ context.Context, _ int, items []int) ([]int, error) { return items, nil }

// BenchmarkPerKey measures throughput through NewPerKey for 1, 100 and
// 100,000 keys and 1, 8 and 64 workers, with 256 concurrent submitters
// (Submit waits for its result, so batches form only from concurrency).
func BenchmarkPerKey(b *testing.B) {
	for _, keys := range []int{1, 100, 100_000} {
		for _, inFlight := range []int{1, 8, 64} {
			b.Run(fmt.Sprintf("keys=%d/inflight=%d", keys, inFlight), func(b *testing.B) {
				cfg := Config[int]{MaxSize: 100, Linger: 0, MaxInFlight: inFlight, MaxQueued: 100_000}
				pk, err := NewPerKey(cfg, identity)
				if err != nil {
					b.Fatal(err)
				}
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(128) // 256 submitters on 2 cores
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						i := int(next.Add(1))
						if _, err := pk.Submit(ctx, i%keys, i); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "items/s")
				if err := pk.Close(context.Background()); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkBatcher is the single-stream batcher for comparison.
func BenchmarkBatcher(b *testing.B) {
	for _, inFlight := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("inflight=%d", inFlight), func(b *testing.B) {
			cfg := Config[int]{MaxSize: 100, Linger: 0, MaxInFlight: inFlight, MaxQueued: 100_000}
			bt, err := New(cfg, func(ctx context.Context, items []int) ([]int, error) { return items, nil })
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetParallelism(128)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for i := 0; pb.Next(); i++ {
					if _, err := bt.Submit(ctx, i); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "items/s")
			if err := bt.Close(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkBatcherEnqueue is the hand-off the relaybus dispatcher makes
// with its completions: 64 submitters that do not wait for results,
// batches of up to 100 after a 2ms linger, one batch in flight, a queue of
// 100 (Block). Its figure is the cost of admission and batching alone.
func BenchmarkBatcherEnqueue(b *testing.B) {
	cfg := Config[int]{MaxSize: 100, Linger: 2 * time.Millisecond, MaxInFlight: 1, MaxQueued: 100}
	var ran atomic.Int64
	bt, err := New(cfg, func(_ context.Context, items []int) ([]struct{}, error) {
		ran.Add(int64(len(items)))
		return make([]struct{}, len(items)), nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32) // 64 submitters on 2 cores
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for i := 0; pb.Next(); i++ {
			if err := bt.Enqueue(ctx, i); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if err := bt.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "items/s")
	if ran.Load() != int64(b.N) {
		b.Fatalf("the batch function saw %d items; want %d", ran.Load(), b.N)
	}
}

// BenchmarkPerKeyMillionKeys sends a million distinct keys through one
// per-key batcher and reports the live heap before and after (after a
// GC) and the lanes left, which must be none: memory follows waiting
// items, not keys ever seen. Run it with -benchtime=1x.
func BenchmarkPerKeyMillionKeys(b *testing.B) {
	const keys = 1_000_000
	for range b.N {
		cfg := Config[int]{MaxSize: 100, Linger: 0, MaxInFlight: 8, MaxQueued: 100_000}
		pk, err := NewPerKey(cfg, identity)
		if err != nil {
			b.Fatal(err)
		}
		before := liveHeap()
		var peakLanes atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 256 {
			wg.Go(func() {
				for {
					k := int(next.Add(1))
					if k > keys {
						return
					}
					if _, err := pk.Submit(context.Background(), k, k); err != nil {
						b.Error(err)
						return
					}
					if k%4096 == 0 {
						if n := int64(pk.Stats().Lanes); n > peakLanes.Load() {
							peakLanes.Store(n)
						}
					}
				}
			})
		}
		wg.Wait()
		// A caller has its result before its worker records the batch
		// complete: wait for the last completion (bounded).
		st := pk.Stats()
		for deadline := time.Now().Add(10 * time.Second); st.InFlight > 0 && time.Now().Before(deadline); st = pk.Stats() {
			time.Sleep(time.Millisecond)
		}
		after := liveHeap()
		if st.Lanes != 0 || st.Queued != 0 {
			b.Fatalf("after %d keys: %+v, want no lanes", keys, st)
		}
		b.ReportMetric(float64(before)/(1<<20), "heapMiB-before")
		b.ReportMetric(float64(after)/(1<<20), "heapMiB-after")
		b.ReportMetric(float64(peakLanes.Load()), "lanes-peak-sampled")
		b.ReportMetric(float64(st.Lanes), "lanes-after")
		runtime.KeepAlive(pk)
		if err := pk.Close(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
