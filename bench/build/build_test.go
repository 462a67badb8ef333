package build

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/refs"
)

const tinyWorker = `package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		fmt.Println(` + "`" + `{"type":"hello","t_ns":1,"protocol":1,"version":"VERSION"}` + "`" + `)
		return
	}
	os.Exit(2)
}
`

func TestBuilderCachesBySHAAndBuildsWorktree(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(version string) {
		if err := os.MkdirAll(filepath.Join(dir, "cmd", "bench"), 0o755); err != nil {
			t.Fatal(err)
		}
		src := strings.Replace(tinyWorker, "VERSION", version, 1)
		if err := os.WriteFile(filepath.Join(dir, "cmd", "bench", "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "git", "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/tiny\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("0.1.0")
	run(t, dir, "git", "add", ".")
	run(t, dir, "git", "commit", "-q", "-m", "v1")
	write("0.2.0-dev") // uncommitted

	ctx := context.Background()
	var logs []string
	b := &Builder{RepoDir: dir, CacheDir: filepath.Join(t.TempDir(), "cache"), Logf: func(f string, a ...any) {
		logs = append(logs, f)
	}}
	head, err := refs.Resolve(ctx, dir, "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := b.Build(ctx, "base", head, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(b.CacheDir, head.SHA, "bench"); bin != want {
		t.Fatalf("bin = %s, want %s", bin, want)
	}
	hello, err := proc.Handshake(ctx, bin)
	if err != nil || hello.Version != "0.1.0" {
		t.Fatalf("committed build hello %+v %v", hello, err)
	}
	if _, err := b.Build(ctx, "base", head, tmp); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(logs[len(logs)-1], "using cached") {
		t.Fatalf("second build not cached: %q", logs)
	}
	if out := run(t, dir, "git", "worktree", "list"); strings.Count(out, "\n") != 0 {
		t.Fatalf("temporary worktree left behind:\n%s", out)
	}

	wt, err := refs.Resolve(ctx, dir, refs.Worktree)
	if err != nil || !wt.Dirty {
		t.Fatalf("worktree ref %+v %v", wt, err)
	}
	bin, err = b.Build(ctx, "candidate", wt, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(bin, b.CacheDir) {
		t.Fatalf("worktree build cached at %s", bin)
	}
	hello, err = proc.Handshake(ctx, bin)
	if err != nil || hello.Version != "0.2.0-dev" {
		t.Fatalf("worktree build hello %+v %v", hello, err)
	}
}

// run runs a command in dir with a throwaway git identity.
func run(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}
