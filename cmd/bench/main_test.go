package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
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
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--scenarios", "7"}, "unknown scenario 7"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--stores", "redis"}, `--stores "redis"`},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--stores", "mongo"}, "MongoDB"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "--plant-candidate-delay", "-1s"}, "--plant-candidate-delay"},
		{[]string{"--base", "HEAD", "--candidate", "HEAD", "stray"}, `unexpected argument "stray"`},
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
