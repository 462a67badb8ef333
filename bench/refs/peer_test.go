package refs

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// peerRepo is a repository whose HEAD has a river peer module, the main
// module's bench/record, an unrelated file, and a branch named river.
func peerRepo(t *testing.T) (dir, head string) {
	t.Helper()
	dir = t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run(t, dir, "git", "init", "-q", "-b", "main")
	write("README.md", "no peer yet\n")
	run(t, dir, "git", "add", ".")
	run(t, dir, "git", "commit", "-q", "-m", "before the peer")
	run(t, dir, "git", "branch", "river")
	write("go.mod", "module example.com/m\n")
	write("bench/record/record.go", "package record\n")
	write("bench/peers/river/go.mod", "module example.com/m/bench/peers/river\n")
	write("bench/peers/river/main.go", "package main\n")
	run(t, dir, "git", "add", ".")
	run(t, dir, "git", "commit", "-q", "-m", "the peer")
	return dir, run(t, dir, "git", "rev-parse", "HEAD")
}

func TestResolvePeer(t *testing.T) {
	t.Parallel()
	dir, head := peerRepo(t)
	ctx := context.Background()

	got, err := Resolve(ctx, dir, "river")
	if err != nil {
		t.Fatal(err)
	}
	want := Ref{Name: "river", SHA: head, Peer: "river"}
	if got != want {
		t.Fatalf("Resolve(river) = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "river (peer, tree "+head[:7]+")" {
		t.Errorf("String() = %q", s)
	}
	got, err = Resolve(ctx, dir, "river@v0.50.0-rc.1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "river@v0.50.0-rc.1" || got.PeerVersion != "v0.50.0-rc.1" || got.Peer != "river" || got.SHA != head {
		t.Fatalf("Resolve(river@v0.50.0-rc.1) = %+v", got)
	}
	// The peer's name shadows the branch; the branch is still reachable.
	branch, err := Resolve(ctx, dir, "refs/heads/river")
	if err != nil || branch.Peer != "" || branch.SHA == head {
		t.Fatalf("Resolve(refs/heads/river) = %+v, %v", branch, err)
	}

	// A change outside the peer's inputs leaves it built from HEAD; a
	// change to an input (here the main module's bench/record) builds it
	// from the working tree.
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Resolve(ctx, dir, "river"); err != nil || got.Worktree || got.Dirty {
		t.Fatalf("unrelated change: %+v, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bench", "record", "new.go"), []byte("package record\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := Resolve(ctx, dir, "river"); err != nil || !got.Worktree || !got.Dirty || got.SHA != head {
		t.Fatalf("changed input: %+v, %v", got, err)
	}
}

func TestResolvePeerErrors(t *testing.T) {
	t.Parallel()
	dir, _ := peerRepo(t)
	ctx := context.Background()
	for _, tc := range []struct{ name, want string }{
		{"river@", "want river or river@vX.Y.Z"},
		{"river@0.50.0", "want a release version"},
		{"river@v0.50", "want a release version"},
		{"river@v0.50.0;rm", "want a release version"},
		{"river@latest", "want a release version"},
		{"ceiling@", "has no library version"},
		{"ceiling@v1.0.0", "has no library version"},
	} {
		if _, err := Resolve(ctx, dir, tc.name); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Resolve(%q): %v, want %q", tc.name, err, tc.want)
		}
	}
	// A tree whose HEAD lacks the peer says so.
	run(t, dir, "git", "checkout", "-q", "river")
	if _, err := Resolve(ctx, dir, "river"); err == nil || !strings.Contains(err.Error(), "has no bench/peers/river/go.mod") {
		t.Errorf("HEAD without the peer: %v", err)
	}
}
