package result

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadRunRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"future":   `{"Schema": 99}`,
		"garbage":  `{`,
		"nullcell": `{"Schema": 1, "Cells": [null]}`,
		"badside":  `{"Schema": 1, "Cells": [{"Samples": [{"Side": "left"}]}]}`,
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); err == nil || !strings.HasPrefix(err.Error(), "result: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
