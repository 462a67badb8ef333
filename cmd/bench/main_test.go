package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/comparison"
	"github.com/berkcansavur/relaybus/bench/result"
	"github.com/berkcansavur/relaybus/bench/result/resulttest"
)

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, &stdout, &stderr)
	return stdout.String() + stderr.String(), err
}

func TestVersion(t *testing.T) {
	out, err := runCLI(t, "version")
	if err != nil || !strings.HasPrefix(out, "relaybus ") || !strings.Contains(out, "worker protocol 1") {
		t.Fatalf("version: %q %v", out, err)
	}
	if _, err := runCLI(t, "version", "extra"); err == nil {
		t.Fatal("version with an argument accepted")
	}
}

func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--base and --candidate are required"},
		{[]string{"--base", "HEAD"}, "--base and --candidate are required"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--quick", "--full"}, "choose one of --quick, --full, --smoke"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--rounds", "-1"}, "--rounds -1 outside"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--window", "10ms"}, "--window 10ms outside"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--scenarios", "1,x"}, `"x" is not a scenario number`},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--scenarios", "99"}, "unknown scenario 99"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--rounds", "3"}, "rounds 3: want an even number"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--stores", "redis"}, `--stores "redis"`},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--stores", "mongo"}, "MongoDB"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--plant-candidate-delay", "-1s"}, "--plant-candidate-delay"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "stray"}, `unexpected argument "stray"`},
		// Checked before the first window (issue 30): a gate scoped to a
		// scenario the run has no cell of, an unknown metric with the
		// valid names, an --out that cannot be written.
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--gate", "deliveries_per_s@dispach:5"}, `this run has no "dispach" cell; its scenarios are publish, dispatch`},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--scenarios", "1", "--gate", "deliveries_per_s@dispatch:5"}, `this run has no "dispatch" cell; its scenarios are publish`},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--gate", "deliveries_per_sec:5"}, "the metrics are deliveries_per_s (deliveries/s)"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--out", "/proc/relaybus-results"}, "--out /proc/relaybus-results"},
		{[]string{"--nosuchflag"}, "flag provided but not defined"},
		{[]string{"gate", "run.json"}, "usage: bench gate"},
		{[]string{"report"}, "usage: bench report"},
		{[]string{"report", "/nonexistent/run.json"}, "result: load run"},
	} {
		_, err := runCLI(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestUnknownRef(t *testing.T) {
	_, err := runCLI(t, "--base", "v99.0.0", "--candidate", "HEAD", "--repo", "../..", "--smoke")
	if err == nil || !strings.Contains(err.Error(), "release v99.0.0 not found") || !strings.Contains(err.Error(), "git fetch") {
		t.Fatalf("unknown release: %v", err)
	}
	_, err = runCLI(t, "--base", "HEAD", "--candidate", "no-such-branch-xyz", "--repo", "../..", "--smoke")
	if err == nil || !strings.Contains(err.Error(), `unknown ref "no-such-branch-xyz"`) {
		t.Fatalf("unknown branch: %v", err)
	}
}

func TestValidateCommand(t *testing.T) {
	root := t.TempDir()
	write := func(dir, name, content string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good, bad := filepath.Join(root, "cell01", "r1-base"), filepath.Join(root, "cell01", "r1-candidate")
	// A v0.1.0 worker's records: six-field P lines.
	write(good, "pub-0.rec", "P\te0\tt\tk\t100\t0\nP\te1\tt\tk\t200\t0\n")
	write(good, "disp-0.rec", "H\te0\ta\tk\t1\t1\t300\t1\nH\te1\ta\tk\t2\t1\t400\t1\n")
	write(bad, "pub-0.rec", "P\te0\tt\tk\t100\t0\nP\te1\tt\tk\t200\t0\n")
	write(bad, "disp-0.rec", "H\te0\ta\tk\t1\t1\t300\t1\n")
	write(bad, "disp-1.rec", "H\te1\ta\tk\t2\t1\t400\t1\nH\te0\ta\tk\t1\t2\t500\t1\n")

	out, err := runCLI(t, "validate", "--handlers", "a", good)
	if err != nil || !strings.Contains(out, "VALID (published 2, expected 2, handled 2)") || !strings.Contains(out, "no window.json") {
		t.Fatalf("good folder: %v\n%s", err, out)
	}
	// The whole tree: one folder INVALID, exit 1.
	out, err = runCLI(t, "validate", "--handlers", "a", root)
	var ee exitError
	if !errors.As(err, &ee) || ee != 1 || !strings.Contains(out, "INVALID: duplicates 1, order violations 1") {
		t.Fatalf("tree: %v\n%s", err, out)
	}
	// A kill of disp-0 after its first handle of e0 explains the repeat
	// in a fault cell, but not the order: e1 was handled by a live owner.
	out, err = runCLI(t, "validate", "--handlers", "a", "--allow-redelivery", "--kill", "disp-0@450", bad)
	if err == nil || !strings.Contains(out, "order violations 1") || !strings.Contains(out, "redeliveries 1") {
		t.Fatalf("kill: %v\n%s", err, out)
	}
	// Without a manifest or --handlers, a folder is INVALID: a handler
	// that ran nothing would otherwise pass (issue 24, class 9).
	out, err = runCLI(t, "validate", good)
	if !errors.As(err, &ee) || ee != 1 || !strings.Contains(out, "no handler list") {
		t.Fatalf("no handlers: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"validate"}, {"validate", "--kill", "x", good}, {"validate", "--restart", "5-1", good}, {"validate", "--crash", "x-9", good},
		{"validate", filepath.Join(root, "nothing-here")}} {
		if _, err := runCLI(t, args...); err == nil || !strings.HasPrefix(err.Error(), "bench: ") {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestReportWrite: bench report --write renders a result set's files again
// beside its run.json, from the run's samples.
func TestReportWrite(t *testing.T) {
	dir := t.TempDir()
	data, err := resulttest.Run().Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "run.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runCLI(t, "report", path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "report.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("report without --write wrote report.md (%v)", err)
	}
	if _, err := runCLI(t, "report", "--write", path); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil || len(md) == 0 {
		t.Fatalf("report --write: report.md %d bytes, %v", len(md), err)
	}
}

func TestSkipCells(t *testing.T) {
	parse := func(args ...string) (comparison.Options, error) {
		f := new(compareFlags)
		rest, err := compareCommand(f).parse("compare", args, io.Discard)
		if err != nil {
			return comparison.Options{}, err
		}
		o, _, err := f.options(rest)
		return o, err
	}
	o, err := parse("--base", "a", "--candidate", "b", "--full", "--skip-cells", "^8 inst")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range o.Matrix.Cells {
		if strings.HasPrefix(c.Name, "8 inst") {
			t.Errorf("cell %q not skipped", c.Name)
		}
	}
	if len(o.Warnings) != 6 || o.Matrix.Mode != result.ModeCustom || !strings.HasPrefix(o.Warnings[0], "--skip-cells: cell \"8 inst") {
		t.Errorf("warnings %q (want the 6 cells of 8 instances), mode %q", o.Warnings, o.Matrix.Mode)
	}
	if _, err := parse("--base", "a", "--candidate", "b", "--skip-cells", "^no such cell"); err == nil {
		t.Error("--skip-cells matching nothing is accepted")
	}
	if _, err := parse("--base", "a", "--candidate", "b", "--skip-cells", "("); err == nil {
		t.Error("an invalid --skip-cells expression is accepted")
	}
}

func TestLifecycleRefusesAPeer(t *testing.T) {
	_, err := runCLI(t, "lifecycle", "--ref", "river", "--repo", "../..")
	if err == nil || !strings.Contains(err.Error(), "lifecycle takes relaybus refs") {
		t.Fatalf("lifecycle --ref river: %v", err)
	}
}
