// Package batch groups concurrent calls into batches: New batches one
// stream, NewPerKey batches per key with at most one batch in flight per
// key (docs/adr/0001-per-key-batching.md). Each caller of Submit waits
// for, and gets, its own item's result; Enqueue hands an item off without
// waiting, for a batch function that acts on its items itself.
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
// The measured figures, and the commands that give them, are in
// docs/adr/0001-per-key-batching.md.
package batch
