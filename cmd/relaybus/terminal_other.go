//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device, as near as the
// standard library tells a terminal here (/dev/null is one too, and
// reads as an empty answer, which refuses): only then does a
// destructive command ask for confirmation.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
