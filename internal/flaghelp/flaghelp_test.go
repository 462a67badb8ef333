package flaghelp

import (
	"flag"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("name", "", "the `NAME` to use")
	fs.Int("n", 0, "how many")
	fs.String("mode", "fast", "the mode")
	fs.Duration("wait", 0, "how long (default: the mode's)")
	var b strings.Builder
	Write(&b, "usage: x [flags]\n", fs)
	want := `usage: x [flags]

flags:
  --mode string
      the mode (default: "fast")
  --n int
      how many (default: 0)
  --name NAME
      the NAME to use (default: "")
  --wait duration
      how long (default: the mode's)
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	b.Reset()
	Write(&b, "usage: y", flag.NewFlagSet("y", flag.ContinueOnError))
	if b.String() != "usage: y\n\nno flags\n" {
		t.Errorf("no flags: got %q", b.String())
	}
}
