package worker

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts a CPU profile written to path (protocol field
// cpu_profile_path) and returns the function that stops it and closes the
// file. The profile covers the whole role, connecting included. The worker
// stops it after its last message and before it exits, so the file is
// complete once the process has exited; runtime/pprof writes the profile
// only when it stops, so a SIGKILLed worker leaves an empty file.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("worker: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("worker: cpu profile: %w", err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return errors.Join(fmt.Errorf("worker: cpu profile: %w", err), os.Remove(path))
		}
		return nil
	}, nil
}
