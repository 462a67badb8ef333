package lifecycle

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mask, mask2 int
		want        string
	}{
		{0, 0, ""},
		{heapXminCommitted | heapXmaxCommitted, 0, "XMIN_COMMITTED|XMAX_COMMITTED"},
		{heapXmaxInvalid, 0, "XMAX_INVALID"},
		{heapXminCommitted | heapXmaxCommitted, heapHotUpdated | heapOnlyTuple, "HOT_UPDATED|HEAP_ONLY|XMIN_COMMITTED|XMAX_COMMITTED"},
		{heapXminCommitted | heapXminInvalid, 0, "XMIN_FROZEN"},
		{heapXminInvalid, 0, "XMIN_INVALID"},
		{heapXmaxLockOnly | heapXmaxKeyshrLock, heapOnlyTuple, "HEAP_ONLY|XMAX_LOCK_ONLY|XMAX_KEYSHR_LOCK"},
		{heapXmaxLockOnly | heapXmaxKeyshrLock | heapXmaxExclLock, 0, "XMAX_LOCK_ONLY|XMAX_SHR_LOCK"},
		{heapXmaxExclLock | heapXmaxIsMulti, 0, "XMAX_EXCL_LOCK|XMAX_IS_MULTI"},
		// Bits the lifecycle does not show (HASVARWIDTH, UPDATED, the
		// attribute count) leave no trace.
		{0x0002 | 0x2000, 0x0011, ""},
	} {
		if got := Flags(tc.mask, tc.mask2); got != tc.want {
			t.Errorf("Flags(%#x, %#x) = %q, want %q", tc.mask, tc.mask2, got, tc.want)
		}
	}
}

func TestStepOf(t *testing.T) {
	t.Parallel()
	r := &Report{Marks: map[string]uint64{StepSetup: 100, StepPublish: 105, StepClaim: 106, StepComplete: 107, StepStop: 109}, End: 110}
	for xid, want := range map[uint32]string{0: "", 99: "before", 100: "setup", 104: "setup", 105: "publish", 106: "claim",
		107: "complete", 108: "complete", 109: "stop", 110: "after"} {
		if got := r.stepOf(xid); got != want {
			t.Errorf("stepOf(%d) = %q, want %q", xid, got, want)
		}
	}
	// Marks in epoch 1 (xid8 = 2^32 + xid): a 32-bit id is placed in it.
	w := &Report{Marks: map[string]uint64{StepSetup: 1<<32 + 5, StepPublish: 1<<32 + 7}, End: 1<<32 + 9}
	if got := w.stepOf(6); got != StepSetup {
		t.Errorf("epoch 1: stepOf(6) = %q", got)
	}
	if got := w.stepOf(8); got != StepPublish {
		t.Errorf("epoch 1: stepOf(8) = %q", got)
	}
}

// v010 is a report shaped like v0.1.0's: three versions of the delivery
// row, none HOT.
func v010() *Report {
	r := &Report{Ref: "v0.1.0", SHA: "6a097bf61c94", Version: "0.1.0", ClaimApart: true,
		Marks: map[string]uint64{StepSetup: 725, StepPublish: 729, StepClaim: 730, StepComplete: 731, StepStop: 732}, End: 732,
		Autovacuum: "server autovacuum=off",
		Deliveries: []Tuple{
			{LP: 1, State: "normal", TID: "(0,1)", Xmin: 729, Xmax: 730, Ctid: "(0,2)", Flags: "XMIN_COMMITTED|XMAX_COMMITTED", Step: StepPublish, XmaxStep: StepClaim},
			{LP: 2, State: "normal", TID: "(0,2)", Xmin: 730, Xmax: 731, Ctid: "(0,3)", Flags: "XMIN_COMMITTED|XMAX_COMMITTED", Step: StepClaim, XmaxStep: StepComplete},
			{LP: 3, State: "normal", TID: "(0,3)", Xmin: 731, Ctid: "(0,3)", Flags: "XMAX_INVALID", Live: true, Step: StepComplete},
		},
		Indexes: []Index{
			{Name: "relaybus_deliveries_completed_idx", Method: "btree", TIDs: []string{"(0,3)"}},
			{Name: "relaybus_deliveries_due_idx", Method: "btree", TIDs: []string{"(0,1)"}, DeadTIDs: []string{"(0,1)"}},
			{Name: "relaybus_deliveries_ordering_idx", Method: "btree", TIDs: []string{}},
			{Name: "relaybus_deliveries_pkey", Method: "btree", TIDs: []string{"(0,1)", "(0,2)", "(0,3)"}},
		},
		Counters: []TableCounters{{Table: "relaybus_deliveries", Inserted: 1, Updated: 2}},
	}
	r.summarize()
	return r
}

// lanes is a report shaped like 0.2.0's: the delivery deleted, a lane
// row updated along a HOT chain.
func lanes() *Report {
	r := &Report{Ref: "pg020", SHA: "5662a47", Version: "0.2.0-dev", ClaimApart: true, HasLanes: true,
		Marks: map[string]uint64{StepSetup: 735, StepPublish: 742, StepClaim: 743, StepComplete: 744, StepStop: 747}, End: 749,
		Deliveries: []Tuple{{LP: 1, State: "normal", TID: "(0,1)", Xmin: 742, Xmax: 746, Ctid: "(0,1)", Step: StepPublish, XmaxStep: StepComplete}},
		Indexes:    []Index{{Name: "relaybus_deliveries_pkey", Method: "btree", TIDs: []string{"(0,1)"}}},
	}
	chain := []Tuple{
		{Block: 194, LP: 1, State: "normal", TID: "(194,1)", Xmin: 735, Xmax: 735, Ctid: "(194,2)", Flags: "HOT_UPDATED", Step: StepSetup, XmaxStep: StepSetup},
		{Block: 194, LP: 2, State: "normal", TID: "(194,2)", Xmin: 735, Xmax: 743, Ctid: "(194,3)", Flags: "HOT_UPDATED|HEAP_ONLY", Step: StepSetup, XmaxStep: StepClaim},
		{Block: 194, LP: 3, State: "normal", TID: "(194,3)", Xmin: 743, Xmax: 748, Ctid: "(194,3)", Flags: "HEAP_ONLY|XMAX_LOCK_ONLY", Step: StepClaim, XmaxStep: StepStop},
		// An untouched lane: setup only.
		{Block: 195, LP: 1, State: "normal", TID: "(195,1)", Xmin: 735, Xmax: 735, Ctid: "(195,2)", Flags: "HOT_UPDATED", Step: StepSetup, XmaxStep: StepSetup},
		{Block: 195, LP: 2, State: "normal", TID: "(195,2)", Xmin: 735, Ctid: "(195,2)", Flags: "HEAP_ONLY", Step: StepSetup},
		{Block: 196, LP: 1, State: "redirect", TID: "(196,1)"},
	}
	r.Lanes = writtenLanes(chain, map[string][]int{"(194,3)": {194}, "(195,2)": {195}})
	r.summarize()
	return r
}

func TestWrittenLanes(t *testing.T) {
	t.Parallel()
	r := lanes()
	if len(r.Lanes) != 1 || r.Lanes[0].Lane != 194 {
		t.Fatalf("lanes %+v: want lane 194 only (195 was written by the setup alone)", r.Lanes)
	}
	var tids []string
	for _, v := range r.Lanes[0].Versions {
		tids = append(tids, v.TID)
	}
	if got := strings.Join(tids, " "); got != "(194,1) (194,2) (194,3)" {
		t.Errorf("lane 194 versions %s, want first to live", got)
	}
	if !r.Lanes[0].Versions[2].Live || r.Lanes[0].Versions[0].Live {
		t.Errorf("only the last version is live: %+v", r.Lanes[0].Versions)
	}
}

func TestSummary(t *testing.T) {
	t.Parallel()
	s := v010().Summary
	if s.HeapTuples != 3 || s.Dead != 2 || s.Indexes != 4 || s.IndexesWithEntries != 3 || s.IndexEntries != 5 ||
		s.EntriesBy[StepPublish] != 2 || s.EntriesBy[StepClaim] != 1 || s.EntriesBy[StepComplete] != 2 {
		t.Errorf("summary %+v", s)
	}
	if l := lanes().Summary; l.HeapTuples != 1 || l.Dead != 1 || l.IndexEntries != 1 || l.LaneVersions != 3 {
		t.Errorf("lanes summary %+v", l)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	got := Text([]*Report{v010(), lanes()})
	for _, want := range []string{
		"v0.1.0 (6a097bf, relaybus 0.1.0)",
		"| pg020 (5662a47, relaybus 0.2.0-dev)",
		"transactions by step: setup 725-728, publish 729, claim 730, complete 731, stop none",
		"  1  729  730  (0,2) XMIN_COMMITTED|XMAX_COMMITTED publish  dead",
		"relaybus_deliveries_due_idx entries=1 -> heap tids (0,1) (marked dead by a scan: (0,1))",
		"relaybus_deliveries_ordering_idx entries=0",
		"lane rows: none (no relaybus_lanes table)",
		"lane 194: versions of that row, first to live",
		"relaybus_deliveries inserted=1 updated=2 hot_updated=0 deleted=0",
		"v0.1.0: 3 heap tuple(s), 2 dead; 5 index entries (2 at publish, 1 at claim, 2 at complete) in 3 of 4 indexes",
		"pg020: 1 heap tuple(s), 1 dead; 1 index entries (1 at publish) in 1 of 1 indexes; 1 lane row(s) written, 3 version(s)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks %q:\n%s", want, got)
		}
	}
	// Side by side: the second column starts at the same place on every
	// line that has one.
	col := -1
	for _, line := range strings.Split(got, "\n") {
		if i := strings.Index(line, " | "); i >= 0 {
			if col >= 0 && i != col {
				t.Fatalf("columns not aligned at %q", line)
			}
			col = i
		}
	}
}

func TestSVGAndWrite(t *testing.T) {
	t.Parallel()
	set := &Set{Started: time.Date(2026, 12, 1, 4, 55, 14, 0, time.UTC), Reports: []*Report{v010(), lanes()}}
	dir := Dir(t.TempDir(), set.Started, []string{"v0.1.0", "origin/pg020"})
	if !strings.HasSuffix(dir, "2026-12-01-045514-lifecycle-v0.1.0-origin-pg020") {
		t.Errorf("dir %s", dir)
	}
	if err := Write(dir, set); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, FileSVG))
	if err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one panel per ref, a box per row version.
	dec := xml.NewDecoder(strings.NewReader(string(svg)))
	rects := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed: %v", err)
			}
			break
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "rx" {
					rects++
				}
			}
		}
	}
	if rects != 3+1+3 {
		t.Errorf("%d version boxes, want 7 (3 v0.1.0 versions, 1 delivery and 3 lane versions)", rects)
	}
	for _, want := range []string{"v0.1.0 (6a097bf)", "pg020 (5662a47)", "lane 194", "HOT"} {
		if !strings.Contains(string(svg), want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	for _, name := range []string{FileText, FileJSON} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := SVG(nil); err == nil {
		t.Error("SVG of nothing")
	}
}
