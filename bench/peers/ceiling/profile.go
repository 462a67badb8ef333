package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts a CPU profile written to path (protocol field
// cpu_profile_path) and returns the function that stops it and closes
// the file, as the relaybus worker does: the profile covers the whole
// role, connecting included, and is complete once the process has
// exited (a SIGKILLed worker leaves an empty file).
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("ceiling: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("ceiling: cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return errors.Join(fmt.Errorf("ceiling: cpu profile: %w", err), os.Remove(path))
		}
		return nil
	}, nil
}
