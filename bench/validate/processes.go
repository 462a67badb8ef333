package validate

import (
	"fmt"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// How a process ended (Process.End).
const (
	// EndDone: it exited with its done line and no error, at the end of
	// its role (a preload) or when the harness stopped it (SIGTERM).
	EndDone = "done"
	// EndKilled: the fault plan SIGKILLed it.
	EndKilled = "killed"
	// EndFailed: it exited with an error, without a done line, or was
	// killed by the harness after it ignored SIGTERM (Process.Error says
	// which).
	EndFailed = "failed"
)

// Process is one worker process the harness started for a window (the
// manifest's list): every publisher, dispatcher, drain dispatcher and
// replacement, and the preload whose records the folder holds.
type Process struct {
	Name string `json:"name"`
	// Role is the protocol role (publisher, preload, dispatcher).
	Role string `json:"role"`
	// Record is the name of its record file in the folder ("disp-0.rec").
	Record string `json:"record"`
	// Drain: a drain dispatcher, started after the window. Replaces: the
	// process it replaced after a database fault. Template: a preload
	// that ran once in the cell's template database, whose record file
	// the folder holds a copy of.
	Drain    bool   `json:"drain,omitempty"`
	Replaces string `json:"replaces,omitempty"`
	Template bool   `json:"template,omitempty"`
	// CompletionRecords: a dispatcher whose worker writes a completion
	// line (record.Completed) for every completion the store confirmed
	// (its hello listed protocol.CapabilityCompletionRecords); its file
	// is checked for them.
	CompletionRecords bool `json:"completion_records,omitempty"`
	// End is how it ended (EndDone, EndKilled, EndFailed); Error, for
	// EndFailed, what the harness saw.
	End   string `json:"end"`
	Error string `json:"error,omitempty"`
	// Counters are the last counters it reported over the protocol: its
	// done line's when it ended EndDone, its last counters line's
	// otherwise; nil when it reported none.
	Counters *protocol.Counters `json:"counters,omitempty"`
}

// checkProcess rejects a listed process the validator cannot use.
func checkProcess(p *Process) error {
	switch {
	case p.Name == "":
		return fmt.Errorf("a process without a name")
	case p.Role != protocol.RolePublisher && p.Role != protocol.RolePreload && p.Role != protocol.RoleDispatcher:
		return fmt.Errorf("process %s: role %q: want %s, %s or %s", p.Name, p.Role, protocol.RolePublisher, protocol.RolePreload, protocol.RoleDispatcher)
	case p.End != EndDone && p.End != EndKilled && p.End != EndFailed:
		return fmt.Errorf("process %s: end %q: want %s, %s or %s", p.Name, p.End, EndDone, EndKilled, EndFailed)
	}
	return nil
}

// lineCounts are what one record file holds, by the counter each kind
// of line answers to.
type lineCounts struct {
	ok, failed, certain, uncertain int64
}

func countLines(f *File) lineCounts {
	var n lineCounts
	for i := range f.Handled {
		if f.Handled[i].OK {
			n.ok++
		} else {
			n.failed++
		}
	}
	for i := range f.Published {
		if f.Published[i].Uncertain {
			n.uncertain++
		} else {
			n.certain++
		}
	}
	return n
}

// processes checks the record files against the processes the manifest
// lists (Input.Processes; none listed: noted, not checked):
//   - the list: each process once; a process listed as killed is the
//     fault plan's, and every process the plan killed is listed so; a
//     failed process only in a cell with a database restart or crash
//     (the harness replaces a worker that fails there, and fails the
//     window anywhere else);
//   - files: every listed process's record file is in the folder, and
//     every record file in the folder is a listed process's;
//   - counters: a process that ended with its done line reported exactly
//     what its file holds (Handled = ok handle lines, HandlerFailed =
//     failed ones, Published = certain commit lines, Uncertain =
//     uncertain ones: a worker counts a record once it has added it, and
//     its done line comes after its record file was closed); any other
//     process's last counters are a lower bound of what a worker wrote to
//     the kernel before it counted: its certain and uncertain commit
//     lines at least Published and Uncertain (a publisher writes a
//     call's records before it counts the call), its ok handle lines at
//     least Completed (a dispatcher writes the records of a completion
//     batch before it sends the batch, and counts only completions the
//     store confirmed). Handled and HandlerFailed bound nothing there:
//     they count records still in the process's buffer, which a kill
//     loses. Nothing bounds its records from above: it may have written
//     more after its last counters line;
//   - publish errors: the window's count is at least its publishers'.
func (c *checker) processes() {
	in, r := c.in, c.r
	if len(in.Processes) == 0 {
		r.ProcessesUnchecked = true
		c.note("records not checked against the processes, nor for completions: the manifest lists none (a run recorded before the field, or a hand-made record set)")
		return
	}
	files := make(map[string]int, len(in.Files))
	for i := range in.Files {
		files[in.Files[i].Name+RecordFileExt] = i
	}
	killed := map[string]bool{}
	for _, f := range in.Expect.Faults {
		if f.Kind == FaultKill {
			killed[f.Process] = true
		}
	}
	names := make(map[string]bool, len(in.Processes))
	claimed := make(map[string]bool, len(in.Processes))
	var publishErrors, noCounters int64
	for i := range in.Processes {
		p := &in.Processes[i]
		if names[p.Name] {
			r.ProcessListViolations++
			c.ex("processes: %s is listed twice", p.Name)
			continue
		}
		names[p.Name] = true
		switch {
		case p.End == EndKilled && !killed[p.Name]:
			r.ProcessListViolations++
			c.ex("processes: %s is listed as killed, but the fault plan killed no such process", p.Name)
		case p.End != EndKilled && killed[p.Name]:
			r.ProcessListViolations++
			c.ex("processes: the fault plan killed %s, but the list says it ended %s", p.Name, p.End)
		case p.End == EndFailed && !(in.Expect.AllowRedelivery && c.dbFault()):
			r.ProcessListViolations++
			c.ex("processes: %s failed (%s) in a cell without a database restart or crash, where no worker may fail", p.Name, p.Error)
		}
		if p.Role == protocol.RolePublisher && p.Counters != nil {
			publishErrors += p.Counters.PublishErrors
		}
		if p.Record == "" || claimed[p.Record] {
			r.RecordFilesMissing++
			if p.Record == "" {
				c.ex("record file missing: %s (role %s) names no record file", p.Name, p.Role)
			} else {
				c.ex("record file missing: %s names %s, the record file of another listed process", p.Name, p.Record)
			}
			continue
		}
		claimed[p.Record] = true
		fi, ok := files[p.Record]
		if !ok {
			r.RecordFilesMissing++
			c.ex("record file missing: %s (role %s, ended %s) wrote %s, which the folder does not hold", p.Name, p.Role, p.End, p.Record)
			continue
		}
		if p.Counters == nil {
			noCounters++
			continue
		}
		c.countersAgainst(p, &in.Files[fi])
	}
	for name := range killed {
		if !names[name] {
			r.ProcessListViolations++
			c.ex("processes: the fault plan killed %s, which the list does not name", name)
		}
	}
	for i := range in.Files {
		if name := in.Files[i].Name + RecordFileExt; !claimed[name] {
			r.RecordFilesUnlisted++
			c.ex("record file of no process: %s was written by no process the manifest lists", name)
		}
	}
	if in.PublishErrors < publishErrors {
		r.CounterMismatches++
		c.ex("counters: the window counts %d failed publish calls, its publishers reported %d", in.PublishErrors, publishErrors)
	}
	if noCounters > 0 {
		c.note("%d processes reported no counters: their record files were not checked against them", noCounters)
	}
}

// countersAgainst checks one process's last counters against its record
// file (see processes for the rule).
func (c *checker) countersAgainst(p *Process, f *File) {
	n, k := countLines(f), p.Counters
	if p.End == EndDone {
		if k.Handled != n.ok || k.HandlerFailed != n.failed || k.Published != n.certain || k.Uncertain != n.uncertain {
			c.r.CounterMismatches++
			c.ex("counters: %s ended with its done line reporting %d ok and %d failed handles, %d certain and %d uncertain commits; its record file holds %d, %d, %d and %d",
				p.Name, k.Handled, k.HandlerFailed, k.Published, k.Uncertain, n.ok, n.failed, n.certain, n.uncertain)
		}
		return
	}
	if n.ok < k.Completed || n.certain < k.Published || n.uncertain < k.Uncertain {
		c.r.CounterMismatches++
		c.ex("counters: %s (ended %s) last reported %d completions, %d certain and %d uncertain commits, more than the %d ok handles, %d certain and %d uncertain commits its record file holds: a record that reached the kernel before it was counted is lost",
			p.Name, p.End, k.Completed, k.Published, k.Uncertain, n.ok, n.certain, n.uncertain)
	}
}
