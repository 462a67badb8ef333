package relaybustest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// Want describes an event a test expects. Type is required; every other
// field left unset matches anything.
type Want struct {
	// Type is the event type.
	Type string
	// Key, when set, is the ordering key: new("") wants an unkeyed
	// event.
	Key *string
	// ID, when set, is the event ID.
	ID string
	// Payload, when set (non-nil), is the payload, byte for byte.
	Payload []byte
	// PayloadJSON, when set, is a value whose JSON encoding the payload
	// must equal as JSON (the order of object keys and the spacing aside):
	// a map, a struct, a json.RawMessage. Not with Payload.
	PayloadJSON any
	// Headers, when set, must each be among the event's headers, with
	// the same value; the event may have others.
	Headers map[string]string
	// Handlers, when set, are the handlers the event was published to,
	// in any order, and no others.
	Handlers []string
}

// payloadPreviewBytesMax bounds the part of a payload a failure prints.
const payloadPreviewBytesMax = 200

// RequirePublished checks that exactly one event of published matches
// want, and returns it. It fails t when none does or when several do,
// listing every published event and how each differs from want.
func RequirePublished(t testing.TB, published []*Published, want Want) *Published {
	t.Helper()
	m := checkWant(t, "RequirePublished", want)
	var matches []*Published
	for _, p := range published {
		if len(m.diff(p)) == 0 {
			matches = append(matches, p)
		}
	}
	switch len(matches) {
	case 1:
		return matches[0]
	case 0:
		t.Fatalf("relaybustest: RequirePublished: no published event matches %s\n%s", m, listDiffs(published, m))
	default:
		t.Fatalf("relaybustest: RequirePublished: %d published events match %s, want exactly one (a narrower Want, or RequirePublishedMany)\n%s",
			len(matches), m, listDiffs(published, m))
	}
	return nil
}

// RequireNotPublished checks that no event of published matches want.
// It fails t listing the events that do.
func RequireNotPublished(t testing.TB, published []*Published, want Want) {
	t.Helper()
	m := checkWant(t, "RequireNotPublished", want)
	var b strings.Builder
	n := 0
	for i, p := range published {
		if len(m.diff(p)) == 0 {
			n++
			fmt.Fprintf(&b, "  [%d] %s\n", i, describe(p))
		}
	}
	if n > 0 {
		t.Fatalf("relaybustest: RequireNotPublished: %d published %s match %s:\n%s", n, plural(n, "event", "events"), m, b.String())
	}
}

// RequirePublishedMany checks that published are exactly the events of
// wants, one each, in order, and returns them. It fails t listing, for
// each position, the event wanted, the event published and how they
// differ.
func RequirePublishedMany(t testing.TB, published []*Published, wants []Want) []*Published {
	t.Helper()
	ms := make([]*matcher, len(wants))
	for i, w := range wants {
		ms[i] = checkWant(t, fmt.Sprintf("RequirePublishedMany: wants[%d]", i), w)
	}
	ok := len(published) == len(wants)
	var b strings.Builder
	for i := range max(len(published), len(wants)) {
		switch {
		case i >= len(published):
			fmt.Fprintf(&b, "  [%d] want %s\n      published nothing\n", i, ms[i])
		case i >= len(wants):
			fmt.Fprintf(&b, "  [%d] want nothing\n      published %s\n", i, describe(published[i]))
		default:
			diffs := ms[i].diff(published[i])
			mark := "ok"
			if len(diffs) > 0 {
				ok = false
				mark = "differs: " + strings.Join(diffs, "; ")
			}
			fmt.Fprintf(&b, "  [%d] want %s\n      published %s\n      %s\n", i, ms[i], describe(published[i]), mark)
		}
	}
	if !ok {
		t.Fatalf("relaybustest: RequirePublishedMany: %d published, %d wanted, in this order:\n%s", len(published), len(wants), b.String())
	}
	return published
}

// matcher is a checked Want, its JSON payload decoded once.
type matcher struct {
	Want
	jsonWant any // PayloadJSON as decoded JSON
}

// checkWant fails t for a Want that cannot be used.
func checkWant(t testing.TB, where string, w Want) *matcher {
	t.Helper()
	m := &matcher{Want: w}
	if w.Type == "" {
		t.Fatalf("relaybustest: %s: Want.Type is empty: say which event type is wanted", where)
	}
	if w.PayloadJSON != nil {
		if w.Payload != nil {
			t.Fatalf("relaybustest: %s: Want has both Payload and PayloadJSON: set one", where)
		}
		enc, err := json.Marshal(w.PayloadJSON)
		if err == nil {
			err = json.Unmarshal(enc, &m.jsonWant)
		}
		if err != nil {
			t.Fatalf("relaybustest: %s: Want.PayloadJSON cannot be encoded as JSON: %v", where, err)
		}
	}
	return m
}

// diff says how p differs from the Want: nothing when it matches.
func (m *matcher) diff(p *Published) []string {
	var d []string
	e := &p.Event
	if e.Type != m.Type {
		d = append(d, fmt.Sprintf("type %q, want %q", e.Type, m.Type))
	}
	if m.Key != nil && e.Key != *m.Key {
		d = append(d, fmt.Sprintf("key %s, want %s", keyText(e.Key), keyText(*m.Key)))
	}
	if m.ID != "" && e.ID != m.ID {
		d = append(d, fmt.Sprintf("id %q, want %q", e.ID, m.ID))
	}
	if m.Payload != nil && !bytes.Equal(e.Payload, m.Payload) {
		d = append(d, fmt.Sprintf("payload %s, want %s", payloadText(e.Payload), payloadText(m.Payload)))
	}
	if m.PayloadJSON != nil {
		var got any
		if err := json.Unmarshal(e.Payload, &got); err != nil {
			d = append(d, fmt.Sprintf("payload %s is not JSON (%v), want JSON %s", payloadText(e.Payload), err, jsonText(m.jsonWant)))
		} else if !reflect.DeepEqual(got, m.jsonWant) {
			d = append(d, fmt.Sprintf("payload JSON %s, want %s", jsonText(got), jsonText(m.jsonWant)))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
		want := m.Headers[name]
		got, ok := e.Headers[name]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("header %q missing, want %q", name, want))
		case got != want:
			d = append(d, fmt.Sprintf("header %q is %q, want %q", name, got, want))
		}
	}
	if m.Handlers != nil {
		got, want := slices.Sorted(slices.Values(p.Handlers)), slices.Sorted(slices.Values(m.Handlers))
		if !slices.Equal(got, want) {
			d = append(d, fmt.Sprintf("handlers %q, want %q", got, want))
		}
	}
	return d
}

// String writes the fields of the Want that are set.
func (m *matcher) String() string {
	parts := []string{fmt.Sprintf("Type: %q", m.Type)}
	if m.Key != nil {
		parts = append(parts, "Key: "+keyText(*m.Key))
	}
	if m.ID != "" {
		parts = append(parts, fmt.Sprintf("ID: %q", m.ID))
	}
	if m.Payload != nil {
		parts = append(parts, "Payload: "+payloadText(m.Payload))
	}
	if m.PayloadJSON != nil {
		parts = append(parts, "PayloadJSON: "+jsonText(m.jsonWant))
	}
	if m.Headers != nil {
		parts = append(parts, fmt.Sprintf("Headers: %v", m.Headers))
	}
	if m.Handlers != nil {
		parts = append(parts, fmt.Sprintf("Handlers: %q", m.Handlers))
	}
	return "Want{" + strings.Join(parts, ", ") + "}"
}

// listDiffs lists every published event and how it differs from m.
func listDiffs(published []*Published, m *matcher) string {
	if len(published) == 0 {
		return "nothing was published"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d published:\n", len(published))
	for i, p := range published {
		fmt.Fprintf(&b, "  [%d] %s\n", i, describe(p))
		if diffs := m.diff(p); len(diffs) > 0 {
			fmt.Fprintf(&b, "      differs: %s\n", strings.Join(diffs, "; "))
		} else {
			b.WriteString("      matches\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// describe is one line about p: its type, key, ID, handlers, headers and
// payload.
func describe(p *Published) string {
	e := &p.Event
	s := fmt.Sprintf("%s key %s id %q handlers %q", e.Type, keyText(e.Key), e.ID, p.Handlers)
	if len(e.Headers) > 0 {
		s += fmt.Sprintf(" headers %v", e.Headers)
	}
	return s + " payload " + payloadText(e.Payload)
}

func keyText(k string) string {
	if k == "" {
		return `"" (unkeyed)`
	}
	return fmt.Sprintf("%q", k)
}

// payloadText shows a payload as text when it is printable UTF-8 (cut at
// payloadPreviewBytesMax), else by its size.
func payloadText(b []byte) string {
	if b == nil {
		return "nil"
	}
	printable := utf8.Valid(b) && !bytes.ContainsFunc(b, func(r rune) bool {
		return !unicode.IsPrint(r) && !unicode.IsSpace(r)
	})
	if !printable {
		return fmt.Sprintf("(%d bytes, not text)", len(b))
	}
	if len(b) > payloadPreviewBytesMax {
		cut := b[:payloadPreviewBytesMax]
		for !utf8.Valid(cut) {
			cut = cut[:len(cut)-1]
		}
		return fmt.Sprintf("%q... (%d bytes)", cut, len(b))
	}
	return fmt.Sprintf("%q", b)
}

// jsonText writes a decoded JSON value compactly, its object keys sorted.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
