package workerkit

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
)

// OptionCPUProfilePath is the config field (protocol.Config's
// cpu_profile_path) that asks for a CPU profile. A worker that can write
// one lists it in OptionRules.TopLevel, so that it is reported applied
// when set; Session.Run writes the profile exactly then.
const OptionCPUProfilePath = "cpu_profile_path"

// StartCPUProfile starts a CPU profile written to path and returns the
// function that stops it and closes the file; errors start with pkg. The
// profile covers the whole role, connecting included. Session.Run stops
// it after the worker's last message and before it exits, so the file is
// complete once the process has exited; runtime/pprof writes the profile
// only when it stops, so a SIGKILLed worker leaves an empty file.
func StartCPUProfile(pkg, path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cpu profile: %w", pkg, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("%s: cpu profile: %w", pkg, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return errors.Join(fmt.Errorf("%s: cpu profile: %w", pkg, err), os.Remove(path))
		}
		return nil
	}, nil
}
