package validate

import (
	"strconv"
	"strings"
)

// Result is the verdict with its counts. Every count named in
// violations makes the window INVALID when it is not zero.
type Result struct {
	Valid bool
	// Published: distinct events published; Uncertain: of those, the ones
	// whose commit outcome is unknown and that no handle proved
	// committed; Expected: (event, handler) pairs that must be handled
	// (certain, non-poison events x handlers).
	Published, Uncertain, Expected int64
	// UncertainHandled: events recorded only as uncertain that some
	// handler handled ok, so they exist and every handler must handle
	// them (they count in Expected).
	UncertainHandled int64

	// HandledOK: (event, handler) pairs with at least one ok handle.
	HandledOK int64
	// Lost: expected pairs with no ok handle that are not dead letters
	// (a dead non-poison pair is counted once, as DeadUnexpected);
	// LostPoison: certain poison pairs neither handled nor dead (a planted
	// failure that vanished), also a loss.
	Lost, LostPoison int64
	// Unexpected: handles, ok or failed, of an event never published or
	// of a handler the workload does not have, or by a process after the
	// fault plan killed it, and commits a killed publisher recorded after
	// its kill.
	Unexpected int64
	// Duplicates: repeats (handles of a pair after an ok handle of it)
	// that no fault explains; Redeliveries: repeats a fault explains
	// (fault cells only).
	Duplicates, Redeliveries int64
	// AttemptViolations: per (event, handler), an attempt run twice that
	// no database fault explains, an attempt lower than one run before
	// it, and (outside fault cells) a gap in the attempts.
	AttemptViolations int64
	// OrderViolations: per (handler, key), first ok handles whose
	// sequence does not increase in handling order (ties in one file by
	// line position), keyed ok handles with a sequence <= 0, repeats
	// after a later sequence that no fault explains, replays out of
	// order, (outside fault cells) every keyed repeat, handles of two
	// sequences that ran at once, and ok handles of a later sequence
	// while an earlier one was still retrying.
	OrderViolations int64
	// TokenConflicts: handles whose lease token of one delivery was
	// already recorded, by another holder or by the same one (a token
	// issued twice).
	TokenConflicts int64
	// TokensUnchecked: handles left out of the lease-token check because
	// their records carry no token or holder (a worker of v0.2.1 or
	// earlier); OverlapUnchecked: keyed handles left out of the overlap
	// check (part of OrderViolations) because their records carry no
	// handler end. Not violations; the notes say so.
	TokensUnchecked  int64 `json:",omitempty"`
	OverlapUnchecked int64 `json:",omitempty"`
	// CompletionViolations: completion lines (dispatchers that write
	// them) without the ok handle of their claim, before it ended, twice
	// for one delivery, followed by a handle of the delivery, preceded by
	// a handle of a higher attempt (a stale lease accepted), of a process
	// not listed as writing them, or not as many as the process counted;
	// and, in a cell without faults, a delivery handled ok and never
	// completed.
	CompletionViolations int64
	// CausalityViolations: handles that started before their event's
	// publish call started, or ended before they started, and publish
	// records whose call started after their commit returned.
	CausalityViolations int64
	// CausalityUnchecked: handles not checked against their publish
	// call's start, which their events' records do not carry (noted).
	CausalityUnchecked int64 `json:",omitempty"`
	// KeyMismatches: handles whose key differs from the publisher's.
	KeyMismatches int64
	// SequenceConflicts: an event handled with two different sequences,
	// or two events of one key with the same sequence.
	SequenceConflicts int64
	// SequenceGaps: per key, a sequence missing between 0 and a
	// sequence a handle reported (a committed event nobody recorded).
	SequenceGaps int64
	// KeyStateViolations: the store's per-key state (Final.Keys) against
	// itself (counter, events and highest sequence disagree) and against
	// the records (a counter beyond what they can hold: a lost tail; below
	// a sequence handled; a key on one side only).
	KeyStateViolations int64
	// CommitOrderViolations: two commits of one key, the first returned
	// before the second started, whose sequences do not increase.
	// CommitOrderChecked: keyed events the check covered (those with a
	// recorded call start, a certain commit and a known sequence).
	CommitOrderViolations, CommitOrderChecked int64
	// CommitOrderSkipped: events left out of the commit-order check
	// because their records carry no call start (a worker older than the
	// field).
	CommitOrderSkipped int64
	// KeyOrderSkipped: keyed ok handles whose order was not checked
	// because the side keeps no per-key order (Expect.NoKeyOrder); not a
	// violation, and the report says so beside the verdict.
	KeyOrderSkipped int64 `json:",omitempty"`
	// Pending, Processing: deliveries left after the drain.
	Pending, Processing int64
	// DeadExpected: dead poison pairs; DeadUnexpected: dead letters that
	// are not poison pairs.
	DeadExpected, DeadUnexpected int64
	// DeadLetterMismatches: dead letters whose attempts the records do
	// not bear out (more attempts than failed handles, beyond one per
	// fault in a fault cell, or a failed attempt past the count), and a
	// store that counts fewer dead deliveries than it lists.
	DeadLetterMismatches int64
	// PoisonHandled: ok handles of poison events.
	PoisonHandled int64
	// OverBudget: handles whose attempt number exceeds the budget, pairs
	// failed more often than the budget allows, and dead letters whose
	// attempts differ from the budget.
	OverBudget int64
	// PublishErrors: failed publish calls that no fault explains (only a
	// database restart or crash can fail a publish);
	// PublishErrorsAllowed: the failed calls a database fault explains,
	// not a violation, reported beside the verdict.
	PublishErrors        int64
	PublishErrorsAllowed int64 `json:",omitempty"`
	// RecordFilesMissing: listed processes whose record file the folder
	// does not hold (or that name none); RecordFilesUnlisted: record files
	// of no listed process; CounterMismatches: processes whose last
	// counters disagree with their record file (exactly for a clean exit,
	// as a lower bound otherwise), and publish errors below the
	// publishers' own; ProcessListViolations: a process listed twice, a
	// kill the list and the fault plan disagree on, a failed process in a
	// cell without a database fault.
	RecordFilesMissing    int64 `json:",omitempty"`
	RecordFilesUnlisted   int64 `json:",omitempty"`
	CounterMismatches     int64 `json:",omitempty"`
	ProcessListViolations int64 `json:",omitempty"`
	// ProcessesUnchecked: the input lists no processes (a manifest
	// written before the list, or a hand-made set), so the record files
	// were not checked against them; not a violation, noted.
	ProcessesUnchecked bool `json:",omitempty"`
	// TruncatedFiles: record files cut short by a process that was not
	// killed by the fault plan (a record was lost).
	TruncatedFiles int64
	// Empty: nothing was published; Idle: no commit and no ok handle
	// fell inside the measured window.
	Empty, Idle bool
	// DeadLettersUnverified: the store listed only part of its dead
	// letters, so they could not be checked.
	DeadLettersUnverified bool
	// NoHandlers: the input names no handlers (a folder without a
	// manifest, and none given), so nothing can be checked as missing.
	NoHandlers bool `json:",omitempty"`
	// TooLarge: the input exceeds MaxRecords and was not checked.
	TooLarge bool
	// UncertainUnexplained: publish records whose outcome was unknown in
	// a cell without a database restart or crash; FailuresUnexplained:
	// failed handles of events not planted to fail (poison, FailFirst)
	// outside every database fault's reach.
	UncertainUnexplained, FailuresUnexplained int64
	// Failures: failed handler calls; not a violation by itself.
	Failures int64
	// Examples: up to MaxExamples concrete violations, human-readable.
	Examples []string
	// Notes: what the check could not cover, not a violation (e.g. the
	// commit-order check skipped for records without call starts).
	Notes []string `json:",omitempty"`
}

// String is one line: "VALID (published 20000, handled 20000, ...)" or
// "INVALID: lost 3, duplicates 1, ... (published ...)".
func (r *Result) String() string {
	var b strings.Builder
	counts := func() {
		b.WriteString("published " + strconv.FormatInt(r.Published, 10))
		b.WriteString(", expected " + strconv.FormatInt(r.Expected, 10))
		b.WriteString(", handled " + strconv.FormatInt(r.HandledOK, 10))
		for _, c := range []namedCount{
			{name: "uncertain", v: r.Uncertain}, {name: "uncertain handled", v: r.UncertainHandled},
			{name: "redeliveries", v: r.Redeliveries}, {name: "dead expected", v: r.DeadExpected}, {name: "failures", v: r.Failures},
			{name: "publish errors allowed (database fault)", v: r.PublishErrorsAllowed},
			{name: "keyed handles not order-checked (no key order)", v: r.KeyOrderSkipped},
		} {
			if c.v != 0 {
				b.WriteString(", " + c.name + " " + strconv.FormatInt(c.v, 10))
			}
		}
	}
	if r.Valid {
		b.WriteString("VALID (")
		counts()
		b.WriteString(")")
		return b.String()
	}
	b.WriteString("INVALID:")
	sep := " "
	for _, c := range r.violations() {
		if c.v != 0 {
			b.WriteString(sep + c.name)
			if !c.flag {
				b.WriteString(" " + strconv.FormatInt(c.v, 10))
			}
			sep = ", "
		}
	}
	b.WriteString(" (")
	counts()
	b.WriteString(")")
	return b.String()
}

type namedCount struct {
	name string
	v    int64
	flag bool // a yes/no violation: printed without its count
}

// violations lists every count that makes a window INVALID.
func (r *Result) violations() []namedCount {
	return []namedCount{
		{name: "no handler list (manifest or --handlers)", v: b2i(r.NoHandlers), flag: true},
		{name: "nothing published", v: b2i(r.Empty), flag: true},
		{name: "idle window (no commit and no handle inside it)", v: b2i(r.Idle), flag: true},
		{name: "lost", v: r.Lost},
		{name: "lost poison (neither handled nor dead)", v: r.LostPoison},
		{name: "unexpected", v: r.Unexpected},
		{name: "duplicates", v: r.Duplicates},
		{name: "attempt violations", v: r.AttemptViolations},
		{name: "order violations", v: r.OrderViolations},
		{name: "lease token conflicts", v: r.TokenConflicts},
		{name: "completion violations", v: r.CompletionViolations},
		{name: "causality violations", v: r.CausalityViolations},
		{name: "key mismatches", v: r.KeyMismatches},
		{name: "sequence conflicts", v: r.SequenceConflicts},
		{name: "sequence gaps", v: r.SequenceGaps},
		{name: "key states against the store", v: r.KeyStateViolations},
		{name: "commit-order violations", v: r.CommitOrderViolations},
		{name: "pending", v: r.Pending},
		{name: "processing", v: r.Processing},
		{name: "dead unexpected", v: r.DeadUnexpected},
		{name: "dead letters against records", v: r.DeadLetterMismatches},
		{name: "poison handled", v: r.PoisonHandled},
		{name: "over the attempt budget", v: r.OverBudget},
		{name: "publish errors", v: r.PublishErrors},
		{name: "uncertain commits without a database fault", v: r.UncertainUnexplained},
		{name: "unplanned failures", v: r.FailuresUnexplained},
		{name: "truncated record files", v: r.TruncatedFiles},
		{name: "record files missing", v: r.RecordFilesMissing},
		{name: "record files of no listed process", v: r.RecordFilesUnlisted},
		{name: "counters against records", v: r.CounterMismatches},
		{name: "process list violations", v: r.ProcessListViolations},
		{name: "dead letters unverified (list truncated)", v: b2i(r.DeadLettersUnverified), flag: true},
		{name: "too large to check", v: b2i(r.TooLarge), flag: true},
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
