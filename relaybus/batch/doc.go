// Package batch groups concurrent calls into batches: New batches one
// stream, NewPerKey batches per key with at most one batch in flight per
// key (ADR 0003). Each caller of Submit waits for, and gets, its own
// item's result; Enqueue hands an item off without waiting, for a batch
// function that acts on its items itself.
//
// # Per key
//
// Each key has a lane, a FIFO of its waiting items, created on its first
// item and removed when it is empty and idle, so memory follows waiting
// items, not keys ever seen. A lane is waiting (not full, not due), ready
// (full or its oldest item has waited Linger) or busy (its batch is
// running). MaxInFlight workers are shared by all keys; ready lanes are
// served first come, first served, and a lane that still has items when
// its batch completes rejoins the back of the line, so a hot key cannot
// starve the others. A batch holds one key's items in submission order,
// and a key's batches run one after another. MaxQueued and
// MaxQueuedWeight bound waiting items across all keys; WhenFull says
// whether Submit then blocks or fails with ErrFull.
//
// All lane state is one plain value (lanes) under one mutex: admission
// checks that the batcher is open and enqueues in one critical section,
// and a worker takes a batch, marks its key busy and records the batch
// as its own in another. formal/perkey.pml model-checks that protocol
// and shows each of those atomic steps is needed; lanes_test.go checks
// the lane transitions step by step against a simple model.
//
// # Failure and shutdown
//
// An error from the batch function goes to every caller of that batch; a
// panic is recovered and reported as *PanicError; a result count that
// does not match the items is ErrResultCount. A caller whose context ends
// while its item waits is withdrawn; once its batch runs, the result is
// dropped for it. Close stops admission and runs what is queued without
// waiting out Linger; if its context ends first, every caller still
// waiting gets ErrClosed. Every caller gets exactly one answer.
//
// # Benchmarks
//
// Measured on the development machine: 2 shared, noisy cores (AMD EPYC),
// Go 1.26, 256 concurrent submitters, MaxSize 100, Linger 0, a batch
// function that returns its input; one short run each, so read the
// figures as orders of magnitude:
//
//	go test -run XXX -bench 'PerKey$|Batcher$' -benchtime=50000x ./relaybus/batch/
//
//	keys      MaxInFlight  items/s   B/item  allocs/item
//	1         1            501,000   404     4
//	1         8            394,000   407     4
//	1         64           395,000   401     4
//	100       1            536,000   409     4
//	100       8            461,000   414     4
//	100       64           339,000   412     4
//	100,000   1            329,000   420     5
//	100,000   8            315,000   417     5
//	100,000   64           282,000   419     5
//	New (one stream)  1    291,000   384     4
//	New (one stream)  8    401,000   196     3
//	New (one stream)  64   392,000   231     3
//
// A million distinct keys through one PerKey (256 submitters, MaxInFlight
// 8) leave no lane behind, and the live heap after a GC returns to its
// baseline (1.24 MiB before, 1.39 MiB after):
//
//	go test -run XXX -bench PerKeyMillionKeys -benchtime=1x ./relaybus/batch/
package batch
