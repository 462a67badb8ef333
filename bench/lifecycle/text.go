package lifecycle

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Text renders the reports side by side, one column per ref, each as the
// seed prints one ("What one delivery leaves behind"), then a line per
// ref that sums it up.
func Text(rs []*Report) string {
	blocks := make([][]string, len(rs))
	for i, r := range rs {
		blocks[i] = Block(r)
	}
	var b strings.Builder
	b.WriteString(sideBySide(blocks, " | "))
	b.WriteString("\n")
	for _, r := range rs {
		b.WriteString(SummaryLine(r) + "\n")
	}
	return b.String()
}

// SummaryLine is one line: heap tuples, dead ones, index entries by step.
func SummaryLine(r *Report) string {
	s := r.Summary
	line := fmt.Sprintf("%s: %d heap tuple(s), %d dead; %d index entries (%s) in %d of %d indexes",
		r.Ref, s.HeapTuples, s.Dead, s.IndexEntries, byStep(s.EntriesBy), s.IndexesWithEntries, s.Indexes)
	if r.HasLanes {
		line += fmt.Sprintf("; %d lane row(s) written, %d version(s)", len(r.Lanes), s.LaneVersions)
	}
	return line
}

// byStep is "6 at publish, 6 at claim, 5 at complete", in step order.
func byStep(m map[string]int) string {
	var parts []string
	for _, st := range append(Steps[:len(Steps):len(Steps)], "before", "after", "unknown") {
		if n := m[st]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d at %s", n, st))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Block is one ref's report as lines.
func Block(r *Report) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	add("%s (%s, relaybus %s)", r.Ref, short(r.SHA), r.Version)
	add("transactions by step: %s", r.stepRanges())
	if !r.ClaimApart {
		add("(the claim and the completion were not told apart: the handle was recorded before the claim was seen)")
	}
	pages := map[int]bool{}
	for _, t := range r.Deliveries {
		pages[t.Block] = true
	}
	add("heap of %s (%d page(s), %d line pointers)", TableDeliveries, len(pages), len(r.Deliveries))
	out = append(out, tupleTable(r.Deliveries, true)...)
	add("indexes of %s: %d, %d with entries", TableDeliveries, r.Summary.Indexes, r.Summary.IndexesWithEntries)
	for _, ix := range r.Indexes {
		switch {
		case ix.Unread != "":
			add("  %s (%s): %s", ix.Name, ix.Method, ix.Unread)
		case len(ix.TIDs) == 0:
			add("  %s entries=0", ix.Name)
		default:
			dead := ""
			if len(ix.DeadTIDs) > 0 {
				dead = fmt.Sprintf(" (marked dead by a scan: %s)", strings.Join(ix.DeadTIDs, " "))
			}
			add("  %s entries=%d -> heap tids %s%s", ix.Name, len(ix.TIDs), strings.Join(ix.TIDs, " "), dead)
		}
	}
	add("index entries: %d (%s)", r.Summary.IndexEntries, byStep(r.Summary.EntriesBy))
	switch {
	case !r.HasLanes:
		add("lane rows: none (no %s table)", TableLanes)
	case len(r.Lanes) == 0:
		add("lane rows: none written after the setup")
	}
	for _, l := range r.Lanes {
		add("lane %d: versions of that row, first to live", l.Lane)
		out = append(out, tupleTable(l.Versions, false)...)
	}
	add("tuple counters:")
	for _, c := range r.Counters {
		add("  %s inserted=%d updated=%d hot_updated=%d deleted=%d", c.Table, c.Inserted, c.Updated, c.HotUpdated, c.Deleted)
	}
	add("autovacuum: %s", r.Autovacuum)
	return out
}

// stepRanges is "setup 731-740, publish 741, ..." over the marks.
func (r *Report) stepRanges() string {
	var parts []string
	for i, st := range Steps {
		from, ok := r.Marks[st]
		if !ok {
			continue
		}
		to := r.End
		if i+1 < len(Steps) {
			if m, ok := r.Marks[Steps[i+1]]; ok {
				to = m
			}
		}
		switch {
		case to <= from:
			parts = append(parts, st+" none")
		case to == from+1:
			parts = append(parts, fmt.Sprintf("%s %d", st, from))
		default:
			parts = append(parts, fmt.Sprintf("%s %d-%d", st, from, to-1))
		}
	}
	return strings.Join(parts, ", ")
}

// tupleTable lays out line pointers as the seed does (lp xmin xmax ctid
// flags), with the step of xmin and whether the version is live.
func tupleTable(ts []Tuple, withBlock bool) []string {
	rows := [][]string{{"lp", "xmin", "xmax", "ctid", "flags", "step", "state"}}
	for _, t := range ts {
		lp := strconv.Itoa(t.LP)
		if withBlock && t.Block > 0 {
			lp = t.TID
		}
		if t.State != "normal" {
			rows = append(rows, []string{lp, "", "", "", "", "", "line pointer " + t.State})
			continue
		}
		state := "dead"
		if t.Live {
			state = "live"
		}
		flags := t.Flags
		if flags == "" {
			flags = "-"
		}
		rows = append(rows, []string{lp, strconv.FormatUint(uint64(t.Xmin), 10), strconv.FormatUint(uint64(t.Xmax), 10),
			t.Ctid, flags, t.Step, state})
	}
	return align(rows, "  ")
}

// align pads the columns of rows to their widest cell.
func align(rows [][]string, indent string) []string {
	var width []int
	for _, row := range rows {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	out := make([]string, len(rows))
	for j, row := range rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range row {
			if i > 0 {
				b.WriteString(" ")
			}
			if i < len(row)-1 {
				b.WriteString(c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)))
			} else {
				b.WriteString(c)
			}
		}
		out[j] = strings.TrimRight(b.String(), " ")
	}
	return out
}

// sideBySide joins blocks as columns, each padded to its widest line.
func sideBySide(blocks [][]string, sep string) string {
	n, width := 0, make([]int, len(blocks))
	for i, bl := range blocks {
		n = max(n, len(bl))
		for _, l := range bl {
			width[i] = max(width[i], utf8.RuneCountInString(l))
		}
	}
	var b strings.Builder
	for row := range n {
		var line strings.Builder
		for i, bl := range blocks {
			cell := ""
			if row < len(bl) {
				cell = bl[row]
			}
			if i > 0 {
				line.WriteString(sep)
			}
			if i < len(blocks)-1 {
				cell += strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			}
			line.WriteString(cell)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	return b.String()
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
