package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/validate"
)

// maxValidateDirs bounds the window folders one `bench validate` walks.
const maxValidateDirs = 10_000

const validateUsage = `usage: bench validate [flags] DIR

Re-checks the record files in DIR (one window: <process>.rec files and the
window.json manifest the harness writes beside them), or in every folder
below DIR that holds record files (a run's records/ folder, kept with
--keep-records). Prints the verdict and its counts per folder and exits 1
when one is INVALID. Without a manifest the records are taken as a clean
cell (no poison, no fault, nothing left in the store); the flags add what
the folder does not say.`

// validateFlags are the expectations a command line adds to (or sets
// over) a folder's manifest.
type validateFlags struct {
	allowRedelivery, allowPublishErrors bool
	handlers                            string
	maxAttempts                         int
	lease                               time.Duration
	faults                              []validate.Fault
}

func validateCommand() *command {
	var vf validateFlags
	return &command{usage: validateUsage, nargs: 1,
		flags: func(fs *flag.FlagSet) { vf.bind(fs) },
		run:   func(_ context.Context, c *call) error { return vf.run(c.args[0], c.stdout) }}
}

// run validates the record folders in or below root.
func (vf *validateFlags) run(root string, stdout io.Writer) error {
	if vf.maxAttempts < 0 || vf.lease < 0 {
		return errors.New("bench: validate: --max-attempts and --lease must be >= 0")
	}
	dirs, err := recordDirs(root)
	if err != nil {
		return err
	}
	invalid := 0
	for _, dir := range dirs {
		m, files, found, err := validate.ReadDir(dir)
		if err != nil {
			return err
		}
		vf.apply(m)
		r := validate.Validate(m.Input(files))
		if !r.Valid {
			invalid++
		}
		fmt.Fprintf(stdout, "%s: %s\n", dir, r)
		if !found {
			handlers := strings.Join(m.Handlers, ",")
			if handlers == "" {
				handlers = "none given (--handlers)"
			}
			fmt.Fprintf(stdout, "  note: no %s: handlers %s, no poison, no fault, nothing left in the store assumed\n",
				validate.ManifestFile, handlers)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(stdout, "  note: %s\n", n)
		}
		for _, e := range r.Examples {
			fmt.Fprintf(stdout, "  %s\n", e)
		}
	}
	if invalid > 0 {
		return fmt.Errorf("bench: validate: %d of %d folders INVALID: %w", invalid, len(dirs), exitError(1))
	}
	return nil
}

// bind binds the validate command's flags to vf.
func (vf *validateFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&vf.allowRedelivery, "allow-redelivery", false, "a fault cell: repeats that a fault explains are redeliveries")
	fs.BoolVar(&vf.allowPublishErrors, "allow-publish-errors", false, "publish errors are allowed (a fault cell)")
	fs.StringVar(&vf.handlers, "handlers", "", "the workload's handlers, comma separated (default: the manifest's; required without one)")
	fs.IntVar(&vf.maxAttempts, "max-attempts", 0, "every handler's attempt budget (0: the manifest's; unchecked without one)")
	fs.DurationVar(&vf.lease, "lease", 0, "the dispatchers' lease (0: the manifest's)")
	fs.Func("kill", "a process the fault plan killed: NAME@UNIX_NS (repeatable)", func(s string) error {
		name, at, ok := strings.Cut(s, "@")
		ns, err := strconv.ParseInt(at, 10, 64)
		if !ok || name == "" || err != nil || ns <= 0 {
			return fmt.Errorf("want NAME@UNIX_NS, got %q", s)
		}
		vf.faults = append(vf.faults, validate.Fault{Kind: validate.FaultKill, Process: name, StartNs: ns, EndNs: ns})
		return nil
	})
	fs.Func("restart", "a database restart: START_NS-END_NS (repeatable)", func(s string) error {
		return vf.addSpan(validate.FaultRestart, s)
	})
	fs.Func("crash", "a database crash (immediate shutdown) and its recovery: START_NS-END_NS (repeatable)", func(s string) error {
		return vf.addSpan(validate.FaultCrash, s)
	})
}

// addSpan adds a fault of kind over START_NS-END_NS.
func (vf *validateFlags) addSpan(kind, s string) error {
	a, b, ok := strings.Cut(s, "-")
	start, err1 := strconv.ParseInt(a, 10, 64)
	end, err2 := strconv.ParseInt(b, 10, 64)
	if !ok || err1 != nil || err2 != nil || start <= 0 || end < start {
		return fmt.Errorf("want START_NS-END_NS, got %q", s)
	}
	vf.faults = append(vf.faults, validate.Fault{Kind: kind, StartNs: start, EndNs: end})
	return nil
}

// apply sets the flags that were given over the manifest's values.
func (vf *validateFlags) apply(m *validate.Manifest) {
	if vf.handlers != "" {
		m.Handlers = strings.Split(vf.handlers, ",")
	}
	m.AllowRedelivery = m.AllowRedelivery || vf.allowRedelivery
	m.AllowPublishErrors = m.AllowPublishErrors || vf.allowPublishErrors
	if vf.maxAttempts > 0 {
		m.MaxAttempts = vf.maxAttempts
	}
	if vf.lease > 0 {
		m.LeaseMs = vf.lease.Milliseconds()
	}
	m.Faults = append(m.Faults, vf.faults...)
}

// recordDirs is dir itself when it holds record files, else every
// folder below it that does, in path order.
func recordDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Ext(path) != validate.RecordFileExt {
			return nil
		}
		if dir := filepath.Dir(path); len(dirs) == 0 || dirs[len(dirs)-1] != dir {
			if len(dirs) == maxValidateDirs {
				return fmt.Errorf("more than %d folders of record files", maxValidateDirs)
			}
			dirs = append(dirs, dir)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bench: validate: %w", err)
	}
	if len(dirs) == 0 {
		return nil, fmt.Errorf("bench: validate: no %s record files in or below %s", validate.RecordFileExt, root)
	}
	slices.Sort(dirs)
	return slices.Compact(dirs), nil
}
