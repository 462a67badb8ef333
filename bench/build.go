package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/protocol"
)

// HandshakeTimeout bounds how long a freshly built worker may take to say
// hello.
const HandshakeTimeout = 30 * time.Second

// Builder builds the bench binary of a ref.
type Builder struct {
	// RepoDir is the git repository (the current one).
	RepoDir string
	// CacheDir keeps binaries by commit: CacheDir/<sha>/bench.
	CacheDir string
	// Logf prints progress; nil is silent.
	Logf func(format string, args ...any)
}

// DefaultCacheDir is $XDG_CACHE_HOME/relaybus-bench, or the OS user cache
// dir's relaybus-bench.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "relaybus-bench"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("bench: no cache dir (set --cache-dir): %w", err)
	}
	return filepath.Join(d, "relaybus-bench"), nil
}

func (b *Builder) logf(format string, args ...any) {
	if b.Logf != nil {
		b.Logf(format, args...)
	}
}

// Build returns the path of the bench binary of ref, building it if
// needed. A commit is built in its own temporary worktree and cached by
// SHA; the working tree (ref.Worktree) is built in place into tmpDir and
// never cached, since its content has no name.
func (b *Builder) Build(ctx context.Context, side string, ref Ref, tmpDir string) (string, error) {
	if ref.Worktree {
		bin := filepath.Join(tmpDir, "bench-"+side+"-worktree")
		b.logf("building %s %s from the working tree...", side, ref)
		if err := goBuild(ctx, b.RepoDir, bin); err != nil {
			return "", err
		}
		return bin, nil
	}
	if b.CacheDir == "" {
		return "", errors.New("bench: Builder.CacheDir is empty")
	}
	bin := filepath.Join(b.CacheDir, ref.SHA, "bench")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		b.logf("using cached %s %s: %s", side, ref, bin)
		return bin, nil
	}
	b.logf("building %s %s...", side, ref)
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("bench: cache dir: %w", err)
	}
	wt, err := os.MkdirTemp(tmpDir, "worktree-"+ref.Short()+"-")
	if err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	// git worktree add wants a path that does not exist yet.
	if err := os.Remove(wt); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	if _, err := git(ctx, b.RepoDir, "worktree", "add", "--detach", wt, ref.SHA); err != nil {
		return "", fmt.Errorf("bench: checking out %s: %w", ref, err)
	}
	defer func() {
		// A fresh context: the build's may be cancelled, the cleanup must run.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := git(cctx, b.RepoDir, "worktree", "remove", "--force", wt); err != nil {
			b.logf("warning: removing worktree %s: %v", wt, err)
			os.RemoveAll(wt)
			_, _ = git(cctx, b.RepoDir, "worktree", "prune")
		}
	}()
	// Build next to the final path, then rename: a cancelled build never
	// leaves a half-written binary in the cache.
	partial := bin + ".partial"
	if err := goBuild(ctx, wt, partial); err != nil {
		os.Remove(partial)
		return "", fmt.Errorf("bench: building %s: %w", ref, err)
	}
	if err := os.Rename(partial, bin); err != nil {
		return "", fmt.Errorf("bench: %w", err)
	}
	b.logf("built %s %s in %s", side, ref, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

func goBuild(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/bench")
	cmd.Dir = dir
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: go build ./cmd/bench in %s: %w\n%s", dir, err, strings.TrimSpace(string(output)))
	}
	return nil
}

// Handshake starts `bin worker` with an empty config and reads its hello:
// the protocol, version and capabilities of that build. A worker must
// write hello before it reads its config, so this works for every role.
// A protocol newer than this harness knows, or no hello, is an error.
func Handshake(ctx context.Context, bin string) (*protocol.Message, error) {
	ctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	defer cancel()
	p, err := startWorker(bin, "handshake", nil, "")
	if err != nil {
		return nil, err
	}
	defer p.Kill()
	hello, err := p.Hello(ctx)
	if err != nil {
		return nil, fmt.Errorf("bench: handshake with %s: %w", bin, err)
	}
	if err := CheckHello(hello); err != nil {
		return nil, fmt.Errorf("bench: handshake with %s: %w", bin, err)
	}
	return hello, nil
}

// CheckHello accepts protocols 1 to protocol.Version.
func CheckHello(hello *protocol.Message) error {
	switch {
	case hello.Protocol < 1:
		return fmt.Errorf("bench: worker hello without a protocol number (got %d)", hello.Protocol)
	case hello.Protocol > protocol.Version:
		return fmt.Errorf("bench: worker speaks protocol %d but this harness knows only up to %d: run the harness of the newer ref (check out the candidate and run its cmd/bench)", hello.Protocol, protocol.Version)
	}
	return nil
}
