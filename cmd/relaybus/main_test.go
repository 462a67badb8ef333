package main

import (
	"os"
	"runtime"
	"testing"
)

// TestIsTerminal: neither /dev/null (a character device) nor a pipe is a
// terminal, so a destructive command run from a script or with its stdin
// redirected never asks, and refuses unless given --yes.
func TestIsTerminal(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	files := map[string]*os.File{"a pipe": r}
	if runtime.GOOS == "linux" {
		// Elsewhere the check is the character device's mode, which
		// /dev/null has (an empty answer, which refuses).
		files["/dev/null"] = devNull
	}
	for name, f := range files {
		if isTerminal(f) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}
