// Package validate checks that one benchmark window was exact: every
// published event handled by every handler, nothing unexpected, every
// repeat of a handled delivery explained by a planted fault, per-key
// order kept (in the store's sequence and in commit order), sequences
// owned by one event each, nothing left pending, dead letters exactly
// where the scenario planted them and with the attempts their budget
// allows, and the window not empty.
//
// # Input
//
// The input is what a window leaves behind: one record file per worker
// process (bench/record), the store's state after the drain (role
// inspect), and the scenario's expectations with the times of the faults
// it injected. ReadDir reads it from a folder (the harness's
// --keep-records folders, or a hand-made set) with its manifest,
// window.json.
//
// # Repeats
//
// A repeat is a handle of an (event, handler) after an ok handle of it.
// Outside fault cells every repeat is a duplicate. In a fault cell
// (Expect.AllowRedelivery) a repeat is a redelivery only when a fault
// explains it, by the time of the handle it repeats and by its own:
// a kill, when the repeated handle was by the killed process, before the
// kill, and the repeat starts after the kill with a higher attempt (the
// takeover charges one); a database restart or crash, when the repeated
// handle started within a lease of it (from its start minus the lease to
// its end plus the lease) and the repeat starts after it began, with an
// attempt no lower (a restart can fail a completion whose delivery is
// then released uncharged; a crash can lose the claim that charged the
// attempt). Anything else is a duplicate: a stale lease running a
// delivery again looks exactly like that.
//
// # Attempts and lease tokens
//
// Per (event, handler), across every process: each attempt runs once
// (unless a database restart or crash explains the rerun, as for a
// repeat), attempts never go back, and outside fault cells they have no
// gaps. One lease token of one delivery is one claim: two holders
// recording it, or one holder running it twice, is a violation in every
// cell. Records without a token or holder are counted and noted.
//
// # Order
//
// Key and sequence are the publisher's key and the sequence the store
// gave the event (from the handles; every handle of one event must give
// the same one, no two events of a key may share one, and a key's
// sequences run from 1 without a gap). Per handler and key, first ok
// handles must have increasing sequences in handling order (equal times
// in one file by line position). A repeat of sequence n must not come
// after a handle of a later sequence that no fault explains (the new
// owner has moved on), consecutive repeats of one process must replay in
// order, no later sequence may be handled ok while an earlier one is
// retrying (between a failed handle and its next attempt), and no two
// handles of different sequences may overlap in time (where the records
// carry the handler's end; the others are noted). Where the publisher
// records the start of its calls, two commits of one key that did not
// overlap in time must have increasing sequences (commit order); records
// without call starts (a v0.1.0 worker) skip that check, and the result
// says so. A side that keeps no per-key order (Expect.NoKeyOrder) skips
// the order, overlap, commit-order and sequence checks, and the result
// says so too.
//
// # Causality, faults and failures
//
// No handle starts before its event's publish call started, no handler
// ends before it starts, no publish call starts after its commit
// returned. Publish errors and uncertain commits need a database restart
// or crash; a failed handle needs poison, a planned failure
// (Expect.FailFirst) or a database fault within a lease of it. Dead
// letters are exactly the planted poison, with the budget's attempts,
// each attempt failed on record (one unrecorded per fault in a fault
// cell).
//
// # Processes
//
// Where the manifest lists the window's processes (Input.Processes), the
// record files are checked against them: each listed process's file is
// there and every file is a listed process's; the kills the list names
// are the fault plan's; a process that ended with its done line counted
// exactly the lines its file holds, and any other process's last
// counters are a lower bound of the lines a worker writes to the kernel
// before it counts them (its commits; its ok handles as many as its
// confirmed completions). Without a list the result notes it.
package validate

import (
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
	"github.com/berkcansavur/relaybus/bench/record"
)

// Input is everything one window (after its drain) left behind.
type Input struct {
	// Files are the record files of the window's processes (publishers,
	// preload, dispatchers, drain dispatchers).
	Files []File
	// Handlers are the handler names every event has (the workload's).
	Handlers []string
	// Final is the store's state after the drain (role inspect).
	Final Final
	// PublishErrors is the number of publish calls that failed (the
	// publishers' counters): their events were not published.
	PublishErrors int64
	// Processes are the worker processes the harness started for the
	// window, with how each ended and its last counters (the manifest's
	// list); none: the record files are not checked against them, and the
	// result notes it.
	Processes []Process
	Expect    Expect
}

// File is the content of one process's record file.
type File struct {
	// Name is the process, as the fault plan names it ("disp-0").
	Name      string
	Published []record.Published
	Handled   []record.Handled
	// Completed are its completion lines (a worker that writes them:
	// Process.CompletionRecords).
	Completed []record.Completed
	// TruncatedTail: the file ended in a partial line. Only a process the
	// fault plan killed may leave one.
	TruncatedTail bool
}

// Final is the store's state after the drain, as role inspect reports
// it (Completed is not checked: 0.2.0 deletes completed deliveries).
type Final = protocol.Inspect

// DeadLetter is one dead (event, handler) delivery with the attempts the
// store counted for it.
type DeadLetter = protocol.DeadLetter

// Fault kinds.
const (
	FaultKill    = "kill"    // a process SIGKILLed by the fault plan
	FaultRestart = "restart" // the database server restarted
	FaultCrash   = "crash"   // the database server crashed (immediate shutdown) and recovered
)

// Fault is one fault the window injected, with its times (wall clock,
// UnixNano).
type Fault struct {
	Kind string `json:"kind"`
	// Process is the killed process's name (FaultKill).
	Process string `json:"process,omitempty"`
	// StartNs and EndNs bound the fault: the kill (from before the kill
	// call to after it returned, or both the time after it returned: a
	// rerun of the killed process's work starts after StartNs, and the
	// process ran nothing after EndNs), the restart's call, or the crash
	// (before it, until the server accepts again).
	StartNs int64 `json:"start_ns"`
	EndNs   int64 `json:"end_ns"`
}

// Span is a measured window [StartNs, EndNs).
type Span struct {
	StartNs int64 `json:"start_ns"`
	EndNs   int64 `json:"end_ns"`
}

// Expect is what the scenario planted and allows.
type Expect struct {
	// PoisonEventIDs are events planted to fail until dead-lettered:
	// their deliveries must be dead, not handled ok.
	PoisonEventIDs map[string]bool
	// MaxAttempts is every handler's attempt budget; 0 = not known, and
	// the budget is not checked.
	MaxAttempts int
	// FailFirst: the workload fails every delivery's first FailFirst
	// attempts (protocol.Workload.FailFirst); failures of other
	// non-poison attempts need a database fault to explain them.
	FailFirst int
	// AllowRedelivery: a fault cell; a repeat explained by Faults is a
	// redelivery (at-least-once), not a duplicate.
	AllowRedelivery bool
	// AllowPublishErrors: publish calls may fail (a database restart).
	AllowPublishErrors bool
	// Faults the window injected.
	Faults []Fault
	// Lease is the dispatchers' lease duration: how long after a
	// restart a delivery in flight may still run again.
	Lease time.Duration
	// Window, when set, is the measured window: a window in which no
	// event was committed and no delivery handled is INVALID.
	Window *Span
	// NoKeyOrder: the side declares it keeps no per-key order (a peer
	// whose hello lists protocol.CapabilityNoKeyOrder) and records no
	// sequences, so the checks that need them (per-key order, commit
	// order, sequence ownership) are skipped and Result.KeyOrderSkipped
	// counts what they would have covered. Every other check applies,
	// the recorded key included.
	NoKeyOrder bool
}

// MaxRecords bounds the published and the handled records of one input:
// indexes are int32 to keep a million-record run compact. A larger run
// is reported INVALID (TooLarge), never checked partially.
const MaxRecords = 1<<31 - 1

// MaxExamples bounds Result.Examples and Result.Notes.
const MaxExamples = 10

// Validate checks in. It never modifies in.
func Validate(in *Input) *Result {
	return newChecker(in).check()
}
