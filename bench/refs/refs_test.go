package refs

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gitRepo makes a repository with: c1 (tag v0.1.0, annotated), c2 with
// the trailer "Release: v0.2.0" and no tag, c3 on branch main.
type gitRepo struct {
	dir        string
	c1, c2, c3 string
}

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

func newGitRepo(t *testing.T) *gitRepo {
	t.Helper()
	dir := t.TempDir()
	run(t, dir, "git", "init", "-q", "-b", "main")
	commit := func(msg string) string {
		f := filepath.Join(dir, "file.txt")
		old, _ := os.ReadFile(f)
		if err := os.WriteFile(f, append(old, msg...), 0o644); err != nil {
			t.Fatal(err)
		}
		run(t, dir, "git", "add", "file.txt")
		run(t, dir, "git", "commit", "-q", "-m", msg)
		return run(t, dir, "git", "rev-parse", "HEAD")
	}
	r := &gitRepo{dir: dir}
	r.c1 = commit("first\n\nRelease: v0.1.0")
	run(t, dir, "git", "tag", "-a", "v0.1.0", "-m", "v0.1.0")
	r.c2 = commit("second\n\nRelease: v0.2.0")
	r.c3 = commit("third: mentions Release: v0.3.0 only in passing")
	return r
}

func TestResolve(t *testing.T) {
	t.Parallel()
	r := newGitRepo(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, want string }{
		{"v0.1.0", r.c1},   // annotated tag, peeled to its commit
		{"v0.2.0", r.c2},   // trailer only
		{"main", r.c3},     // branch
		{"HEAD", r.c3},     // committed HEAD
		{r.c2[:10], r.c2},  // short SHA
		{r.c1, r.c1},       // full SHA
		{" HEAD~1 ", r.c2}, // revision expression, trimmed
	} {
		got, err := Resolve(ctx, r.dir, tc.name)
		if err != nil {
			t.Errorf("Resolve(%q): %v", tc.name, err)
			continue
		}
		if got.SHA != tc.want || got.Worktree || got.Dirty {
			t.Errorf("Resolve(%q) = %+v, want SHA %s", tc.name, got, tc.want)
		}
	}
}

func TestResolveWorktree(t *testing.T) {
	t.Parallel()
	r := newGitRepo(t)
	ctx := context.Background()
	got, err := Resolve(ctx, r.dir, Worktree)
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA != r.c3 || !got.Worktree || got.Dirty {
		t.Fatalf("clean worktree: %+v", got)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "file.txt"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = Resolve(ctx, r.dir, Worktree)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Dirty || !strings.Contains(got.String(), "+dirty") {
		t.Fatalf("dirty worktree: %+v %s", got, got)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	r := newGitRepo(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, want string }{
		{"v0.3.0", "run `git fetch --tags`"}, // trailer text not at line start
		{"v9.9.9", `no commit with the trailer "Release: v9.9.9"`},
		{"nosuchbranch", `unknown ref "nosuchbranch"`},
		{"", "empty ref"},
		{"--all", "invalid ref"},
	} {
		_, err := Resolve(ctx, r.dir, tc.name)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "refs: ") {
			t.Errorf("Resolve(%q) error = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := Resolve(ctx, t.TempDir(), "HEAD"); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Errorf("outside a repo: %v", err)
	}
}

func TestResolveShallowClone(t *testing.T) {
	t.Parallel()
	r := newGitRepo(t)
	ctx := context.Background()
	clone := filepath.Join(t.TempDir(), "clone")
	run(t, r.dir, "git", "clone", "-q", "--no-tags", "--depth", "1", "file://"+r.dir, clone)
	got, err := Resolve(ctx, clone, "HEAD")
	if err != nil || got.SHA != r.c3 {
		t.Fatalf("HEAD in shallow clone: %+v %v", got, err)
	}
	for _, name := range []string{"v0.1.0", "v0.2.0"} {
		_, err := Resolve(ctx, clone, name)
		if err == nil || !strings.Contains(err.Error(), "shallow clone") || !strings.Contains(err.Error(), "git fetch --unshallow") {
			t.Errorf("Resolve(%q) in a shallow clone: %v", name, err)
		}
	}
	if _, err := Resolve(ctx, clone, r.c1); err == nil || !strings.Contains(err.Error(), "git fetch --unshallow") {
		t.Errorf("old SHA in a shallow clone: %v", err)
	}
	// After unshallowing, the trailer-only release resolves without tags.
	run(t, clone, "git", "fetch", "-q", "--no-tags", "--unshallow")
	got, err = Resolve(ctx, clone, "v0.2.0")
	if err != nil || got.SHA != r.c2 {
		t.Fatalf("v0.2.0 after unshallow: %+v %v", got, err)
	}
	got, err = Resolve(ctx, clone, "v0.1.0")
	if err != nil || got.SHA != r.c1 {
		t.Fatalf("v0.1.0 (trailer, no tag) after unshallow: %+v %v", got, err)
	}
}
