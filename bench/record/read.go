package record

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// File is the content of one record file.
type File struct {
	Published []Published
	Handled   []Handled
	Completed []Completed
	// TruncatedTail: the file ended with a line without its newline (the
	// process was killed mid-write); that line was dropped.
	TruncatedTail bool
}

// ReadFile reads a record file. A final line without '\n' is dropped and
// reported in File.TruncatedTail; any other malformed line is an error
// naming its line number.
func ReadFile(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("record: read: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return f, nil
}

// Parse parses the content of a record file (see ReadFile).
func Parse(data []byte) (*File, error) {
	// One string for the whole file: every field is a substring of it,
	// so a million records cost a few allocations, not several million.
	s := string(data)
	f := &File{}
	nP, nH := countKinds(data)
	f.Published = make([]Published, 0, nP)
	f.Handled = make([]Handled, 0, nH)
	lineNo := 0
	for len(s) > 0 {
		lineNo++
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			f.TruncatedTail = true
			break
		}
		line := s[:i]
		s = s[i+1:]
		if err := parseLine(f, line); err != nil {
			return nil, fmt.Errorf("record: line %d: %w", lineNo, err)
		}
	}
	return f, nil
}

// countKinds estimates the capacity of each slice so that appends do
// not copy a million-element slice several times.
func countKinds(data []byte) (p, h int) {
	p = bytes.Count(data, []byte("\nP\t"))
	h = bytes.Count(data, []byte("\nH\t"))
	if bytes.HasPrefix(data, []byte("P\t")) {
		p++
	}
	if bytes.HasPrefix(data, []byte("H\t")) {
		h++
	}
	return p, h
}

func parseLine(f *File, line string) error {
	if len(line) > MaxLineBytes {
		return fmt.Errorf("line longer than %d bytes", MaxLineBytes)
	}
	if strings.IndexByte(line, '\r') >= 0 {
		return errors.New("carriage return in line")
	}
	var fields [11]string
	n := 0
	for {
		i := strings.IndexByte(line, '\t')
		if n == len(fields) {
			return errors.New("too many fields")
		}
		if i < 0 {
			fields[n] = line
			n++
			break
		}
		fields[n] = line[:i]
		n++
		line = line[i+1:]
	}
	switch fields[0] {
	case "P":
		if n != 6 && n != 7 {
			return fmt.Errorf("kind P line has %d fields, want 6 or 7", n)
		}
		if fields[1] == "" {
			return errors.New("empty event id")
		}
		commit, err := parseInt("commit_ns", fields[4])
		if err != nil {
			return err
		}
		unc, err := parseBool("uncertain", fields[5])
		if err != nil {
			return err
		}
		var callStart int64
		if n == 7 {
			if callStart, err = parseInt("call_start_ns", fields[6]); err != nil {
				return err
			}
			if callStart <= 0 {
				// 0 is written as an absent field; a negative time is
				// not one the writer produces.
				return fmt.Errorf("non-canonical call_start_ns %q", fields[6])
			}
		}
		f.Published = append(f.Published, Published{
			EventID: fields[1], EventType: fields[2], Key: fields[3], CommitNs: commit, Uncertain: unc, CallStartNs: callStart,
		})
	case "H":
		if n != 8 && n != 11 {
			return fmt.Errorf("kind H line has %d fields, want 8 or 11", n)
		}
		if fields[1] == "" {
			return errors.New("empty event id")
		}
		if fields[2] == "" {
			return errors.New("empty handler")
		}
		seq, err := parseInt("sequence", fields[4])
		if err != nil {
			return err
		}
		attempt, err := parseInt("attempt", fields[5])
		if err != nil {
			return err
		}
		if int64(int(attempt)) != attempt {
			return fmt.Errorf("attempt %d out of range", attempt)
		}
		handle, err := parseInt("handle_ns", fields[6])
		if err != nil {
			return err
		}
		ok, err := parseBool("ok", fields[7])
		if err != nil {
			return err
		}
		h := Handled{
			EventID: fields[1], Handler: fields[2], Key: fields[3], Sequence: seq,
			Attempt: int(attempt), HandleNs: handle, OK: ok,
		}
		if n == 11 {
			if h.EndNs, err = parseInt("end_ns", fields[8]); err != nil {
				return err
			}
			if h.EndNs <= 0 {
				// Unset is written as three absent fields; a
				// negative time is not one the writer produces.
				return fmt.Errorf("non-canonical end_ns %q", fields[8])
			}
			if h.Holder = fields[9]; h.Holder == "" {
				return errors.New("empty holder")
			}
			if h.Token = fields[10]; h.Token == "" {
				return errors.New("empty token")
			}
		}
		f.Handled = append(f.Handled, h)
	case "C":
		if n != 6 {
			return fmt.Errorf("kind C line has %d fields, want 6", n)
		}
		c := Completed{EventID: fields[1], Handler: fields[2], Token: fields[4]}
		switch {
		case c.EventID == "":
			return errors.New("empty event id")
		case c.Handler == "":
			return errors.New("empty handler")
		case c.Token == "":
			return errors.New("empty token")
		}
		attempt, err := parseInt("attempt", fields[3])
		if err != nil {
			return err
		}
		if int64(int(attempt)) != attempt {
			return fmt.Errorf("attempt %d out of range", attempt)
		}
		c.Attempt = int(attempt)
		if c.CompletedNs, err = parseInt("completed_ns", fields[5]); err != nil {
			return err
		}
		if c.CompletedNs <= 0 {
			return fmt.Errorf("non-canonical completed_ns %q", fields[5])
		}
		f.Completed = append(f.Completed, c)
	default:
		return fmt.Errorf("unknown kind %q", fields[0])
	}
	return nil
}

// parseInt accepts exactly what strconv.AppendInt writes: an optional
// '-' and decimal digits, no '+', no leading zeros, no "-0". Being
// strict keeps the format canonical (every parsed line re-encodes to the
// same bytes), which the fuzz test checks.
func parseInt(name, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q", name, s)
	}
	digits := s
	if digits[0] == '-' {
		digits = digits[1:]
	}
	if digits[0] == '+' || s[0] == '+' || (len(digits) > 1 && digits[0] == '0') || s == "-0" {
		return 0, fmt.Errorf("non-canonical %s %q", name, s)
	}
	return v, nil
}

func parseBool(name, s string) (bool, error) {
	switch s {
	case "1":
		return true, nil
	case "0":
		return false, nil
	}
	return false, fmt.Errorf("bad %s %q (want 0 or 1)", name, s)
}
