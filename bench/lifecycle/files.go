package lifecycle

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/result"
)

// Set is one lifecycle command's result: every ref's report, and where
// they were taken.
type Set struct {
	Started  time.Time           `json:"started"`
	Machine  map[string]string   `json:"machine,omitempty"`
	Database result.DatabaseInfo `json:"database"`
	Reports  []*Report           `json:"reports"`
}

// Files in a lifecycle results folder.
const (
	FileText = "lifecycle.txt"
	FileJSON = "lifecycle.json"
	FileSVG  = "lifecycle.svg"
)

// Dir is the results folder of a set under out:
// <out>/<date>-lifecycle-<ref>-<ref>..., the date with the start time (UTC)
// as a comparison's folder has it.
func Dir(out string, started time.Time, refs []string) string {
	slugs := make([]string, len(refs))
	for i, r := range refs {
		slugs[i] = result.Slug(r)
	}
	return filepath.Join(out, started.UTC().Format("2006-01-02-150405")+"-lifecycle-"+strings.Join(slugs, "-"))
}

// Write writes the set's text, JSON and SVG into dir.
func Write(dir string, s *Set) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	svg, err := SVG(s.Reports)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	for name, b := range map[string][]byte{FileText: []byte(Text(s.Reports)), FileJSON: append(data, '\n'), FileSVG: svg} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("lifecycle: %w", err)
		}
	}
	return nil
}
