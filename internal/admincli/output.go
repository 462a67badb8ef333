package admincli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/berkcansavur/relaybus/relaybus"
)

// The JSON the commands write: field names in snake case, times in RFC
// 3339 (UTC, nanoseconds), durations in seconds. A field is added, never
// renamed or removed.

// deliveryJSON is a delivery in a list (no payload) or shown in full.
type deliveryJSON struct {
	ID             string            `json:"id"`
	Status         relaybus.Status   `json:"status"`
	Handler        string            `json:"handler"`
	EventID        string            `json:"event_id"`
	EventType      string            `json:"event_type"`
	Key            string            `json:"key"`
	Sequence       int64             `json:"sequence"`
	Attempts       int               `json:"attempts"`
	MaxAttempts    int               `json:"max_attempts"`
	Suspect        bool              `json:"suspect"`
	LastError      string            `json:"last_error"`
	AvailableAt    time.Time         `json:"available_at"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	EventCreatedAt time.Time         `json:"event_created_at"`
	PayloadBytes   int               `json:"payload_bytes"`
	Headers        map[string]string `json:"headers,omitempty"`
	// Shown in full only (dead show): the payload, exactly, and as text
	// when it is UTF-8.
	PayloadBase64 *[]byte `json:"payload_base64,omitempty"`
	PayloadText   *string `json:"payload_text,omitempty"`
}

func toJSON(d *relaybus.Delivery, full bool) *deliveryJSON {
	j := &deliveryJSON{
		ID: d.ID, Status: d.Status, Handler: d.Handler,
		EventID: d.EventID, EventType: d.EventType, Key: d.Key, Sequence: d.Sequence,
		Attempts: d.Attempts, MaxAttempts: d.MaxAttempts, Suspect: d.Suspect, LastError: d.LastError,
		AvailableAt: d.AvailableAt.UTC(), CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(),
		EventCreatedAt: d.EventCreatedAt.UTC(), PayloadBytes: len(d.Payload),
	}
	if full {
		j.Headers = d.Headers
		p := d.Payload
		if p == nil {
			p = []byte{}
		}
		j.PayloadBase64 = &p
		if utf8.Valid(p) {
			text := string(p)
			j.PayloadText = &text
		}
	}
	return j
}

// writeJSON writes v, indented, and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// lastErrorCellBytesMax bounds the last error in a list's table: its
// first line, cut; dead show prints it whole.
const lastErrorCellBytesMax = 80

// oneLine is the first line of s, cut at n bytes (on a rune boundary).
func oneLine(s string, n int) string {
	line, _, more := strings.Cut(s, "\n")
	if len(line) > n {
		line = line[:n]
		for !utf8.ValidString(line) {
			line = line[:len(line)-1]
		}
		more = true
	}
	if more {
		line += "..."
	}
	return line
}

// cell makes s safe for a table cell: no tabs or control characters.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
}

// timeText is t in UTC to the second, or "-".
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// parseRetention reads a retention: a Go duration (720h, 90m) or whole
// days (30d). 0 keeps that kind forever.
func parseRetention(flagName, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 || n > maxRetentionDays {
			return 0, usagef("--%s %q: days must be a whole number in [0, %d] (30d), or a Go duration (720h)", flagName, s, maxRetentionDays)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, usagef("--%s %q: not a duration: give whole days (30d) or a Go duration (720h, 90m)", flagName, s)
	}
	if d < 0 {
		return 0, usagef("--%s %q: a retention cannot be negative", flagName, s)
	}
	return d, nil
}

// maxRetentionDays bounds a retention given in days: past a century it
// is a typo (and a time.Duration holds about 290 years).
const maxRetentionDays = 36_500

// durationText is d rounded for a person: to the second past a minute.
func durationText(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.String()
}

// retentionText is a retention for a person: days when whole.
func retentionText(d time.Duration) string {
	if day := 24 * time.Hour; d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

// isText reports whether s is printable UTF-8 text (line breaks and tabs
// allowed).
func isText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
	}
	return true
}

// indent indents every line of s by two spaces; empty s is "  -".
func indent(s string) string {
	if s == "" {
		return "  -"
	}
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}
