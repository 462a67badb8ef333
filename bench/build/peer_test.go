package build

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/proc"
	"github.com/berkcansavur/relaybus/bench/refs"
)

// A stand-in for bench/peers/river: its own module, replaced onto the
// tree's root like the real one, saying hello with a version.
const (
	tinyPeerMod = "module example.com/tiny/bench/peers/river\n\ngo 1.22\n\nrequire example.com/tiny v0.0.0\n\nreplace example.com/tiny => ../../..\n"
	tinyPeer    = `package main

import (
	"fmt"
	"os"

	"example.com/tiny/bench/protocol"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		fmt.Println(` + "`" + `{"type":"hello","t_ns":1,"protocol":1,"version":"river VERSION","capabilities":["peer","peer:river","no-key-order"]}` + "`" + `)
		return
	}
	os.Exit(protocol.Code)
}
`
)

func TestBuilderBuildsPeerCachedByCommit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
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
	write("go.mod", "module example.com/tiny\n\ngo 1.22\n")
	write("bench/protocol/protocol.go", "package protocol\n\nconst Code = 2\n")
	write("bench/peers/river/go.mod", tinyPeerMod)
	write("bench/peers/river/main.go", strings.Replace(tinyPeer, "VERSION", "v1", 1))
	run(t, dir, "git", "add", ".")
	run(t, dir, "git", "commit", "-q", "-m", "peer")

	ctx := context.Background()
	var logs []string
	b := &Builder{RepoDir: dir, CacheDir: filepath.Join(t.TempDir(), "cache"), Logf: func(f string, a ...any) {
		logs = append(logs, f)
	}}
	ref, err := refs.Resolve(ctx, dir, "river")
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin, err := b.Build(ctx, "base", ref, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(b.CacheDir, "peers", "river", ref.SHA+"-pinned", "river"); bin != want {
		t.Fatalf("bin = %s, want %s", bin, want)
	}
	hello, err := proc.Handshake(ctx, bin)
	if err != nil || hello.Version != "river v1" {
		t.Fatalf("committed peer hello %+v %v", hello, err)
	}
	if _, err := b.Build(ctx, "base", ref, tmp); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(logs[len(logs)-1], "using cached") {
		t.Fatalf("second build not cached: %q", logs)
	}
	if out := run(t, dir, "git", "worktree", "list"); strings.Count(out, "\n") != 0 {
		t.Fatalf("temporary worktree left behind:\n%s", out)
	}

	// An uncommitted change to the peer: built from the working tree,
	// never cached.
	write("bench/peers/river/main.go", strings.Replace(tinyPeer, "VERSION", "v2-dev", 1))
	ref, err = refs.Resolve(ctx, dir, "river")
	if err != nil || !ref.Worktree {
		t.Fatalf("changed peer: %+v %v", ref, err)
	}
	bin, err = b.Build(ctx, "base", ref, tmp)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(bin, b.CacheDir) {
		t.Fatalf("working tree peer cached at %s", bin)
	}
	if hello, err := proc.Handshake(ctx, bin); err != nil || hello.Version != "river v2-dev" {
		t.Fatalf("working tree peer hello %+v %v", hello, err)
	}
}

func TestVersionEdits(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "bench", "peers", "river")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mod := `module example.com/tiny/bench/peers/river

go 1.22

replace example.com/tiny => ../../..

require (
	example.com/tiny v0.0.0
	github.com/jackc/pgx/v5 v5.1.0
	github.com/riverqueue/river v0.51.2
	github.com/riverqueue/river/rivertype v0.51.2
)

require (
	github.com/riverqueue/river/riverdriver v0.51.2 // indirect
	github.com/riverqueue/riverui v0.1.0 // indirect
)
`
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		t.Fatal(err)
	}
	p := peer.River
	edits, err := versionEdits(context.Background(), dir, dir, p, "v0.50.0")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(dir)))
	want := []string{
		"-require=github.com/riverqueue/river@v0.50.0",
		"-require=github.com/riverqueue/river/rivertype@v0.50.0",
		"-droprequire=github.com/riverqueue/river/riverdriver",
		"-replace=example.com/tiny=" + root,
	}
	if !slices.Equal(edits, want) {
		t.Fatalf("edits\n%q\nwant\n%q", edits, want)
	}

	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/other\n\ngo 1.22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := versionEdits(context.Background(), dir, dir, p, "v0.50.0"); err == nil || !strings.Contains(err.Error(), "requires none of") {
		t.Fatalf("a module without River: %v", err)
	}
}
