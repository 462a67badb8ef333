package result

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode"
)

// FileName is the name of the run file in a results folder.
const FileName = "run.json"

// Dir is the results folder of run under out:
// <out>/<date>-<base>-vs-<candidate>, the date with the start time (UTC,
// to the second) so that two runs of one day do not collide.
func Dir(out string, run *Run) string {
	return filepath.Join(out, run.Started.UTC().Format("2006-01-02-150405")+"-"+
		Slug(run.Base.Ref)+"-vs-"+Slug(run.Candidate.Ref))
}

// Write writes run as dir/run.json, creating dir. It is the only writer
// of run.json.
func Write(dir string, run *Run) error {
	data, err := run.Encode()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("result: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o644); err != nil {
		return fmt.Errorf("result: %w", err)
	}
	return nil
}

// Slug makes a name safe for paths and benchmark names: letters, digits,
// '.', '_' and '-' only, every other run of characters replaced by one
// '-'.
func Slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_') {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimRight(b.String(), "-")
}
