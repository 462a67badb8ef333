package validate

import (
	"strconv"
	"strings"
)

// String is one line: "VALID (published 20000, handled 20000, ...)" or
// "INVALID: lost 3, duplicates 1, ...".
func (r *Result) String() string {
	var b strings.Builder
	if r.Valid {
		b.WriteString("VALID (")
		b.WriteString("published " + strconv.FormatInt(r.Published, 10))
		b.WriteString(", expected " + strconv.FormatInt(r.Expected, 10))
		b.WriteString(", handled " + strconv.FormatInt(r.HandledOK, 10))
		for _, c := range []struct {
			name string
			v    int64
		}{
			{"uncertain", r.Uncertain}, {"redeliveries", r.Redeliveries},
			{"dead expected", r.DeadExpected}, {"failures", r.Failures},
		} {
			if c.v != 0 {
				b.WriteString(", " + c.name + " " + strconv.FormatInt(c.v, 10))
			}
		}
		b.WriteString(")")
		return b.String()
	}
	b.WriteString("INVALID:")
	sep := " "
	for _, c := range r.violations() {
		if c.v != 0 {
			b.WriteString(sep + c.name + " " + strconv.FormatInt(c.v, 10))
			sep = ", "
		}
	}
	b.WriteString(" (published " + strconv.FormatInt(r.Published, 10) +
		", expected " + strconv.FormatInt(r.Expected, 10) +
		", handled " + strconv.FormatInt(r.HandledOK, 10) + ")")
	return b.String()
}

type namedCount struct {
	name string
	v    int64
}

// violations lists every count that makes a run INVALID.
func (r *Result) violations() []namedCount {
	return []namedCount{
		{"lost", r.Lost},
		{"lost poison (neither handled nor dead)", r.LostPoison},
		{"unexpected", r.Unexpected},
		{"duplicates", r.Duplicates},
		{"order violations", r.OrderViolations},
		{"pending", r.Pending},
		{"processing", r.Processing},
		{"dead unexpected", r.DeadUnexpected},
		{"poison handled", r.PoisonHandled},
		{"dead letters unverified (list truncated)", b2i(r.DeadLettersUnverified)},
		{"too large to check", b2i(r.TooLarge)},
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
