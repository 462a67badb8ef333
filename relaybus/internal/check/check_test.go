package check

import (
	"errors"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/relaybus/relaytype"
)

// The wording every ErrInvalid error of the Bus and of the params'
// Validate methods shares: "relaybus: <what>: relaybus: invalid input".
func TestInvalidf(t *testing.T) {
	t.Parallel()
	err := Invalidf("field %q is %d", "x", 3)
	if !errors.Is(err, relaytype.ErrInvalid) || err.Error() != `relaybus: field "x" is 3: relaybus: invalid input` {
		t.Fatalf("Invalidf = %q", err)
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "name", strings.Repeat("a", 8), "ключ"} {
		if err := Text("what", s, 8); err != nil {
			t.Errorf("Text(%q): %v", s, err)
		}
	}
	for s, want := range map[string]string{
		strings.Repeat("a", 9): "what is 9 bytes, over the limit of 8",
		"a\xffb":               "what is not valid UTF-8",
		"a\x00b":               "what contains a NUL byte",
	} {
		err := Text("what", s, 8)
		if !errors.Is(err, relaytype.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Text(%q) = %v, want ErrInvalid saying %q", s, err, want)
		}
	}
}
