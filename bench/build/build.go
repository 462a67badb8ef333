// Package build builds the bench binary of a resolved ref: a commit in a
// temporary git worktree, cached by its SHA, or the working tree in
// place. The binary is both that ref's worker (protocol 1) and its CLI.
package build

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/refs"
)

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
		return "", fmt.Errorf("build: no cache dir (set --cache-dir): %w", err)
	}
	return filepath.Join(d, "relaybus-bench"), nil
}

// NewBuilder is a Builder of the repository at repoDir with its cache in
// cacheDir, or in DefaultCacheDir when cacheDir is "".
func NewBuilder(repoDir, cacheDir string, logf func(format string, args ...any)) (*Builder, error) {
	if cacheDir == "" {
		var err error
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return nil, err
		}
	}
	return &Builder{RepoDir: repoDir, CacheDir: cacheDir, Logf: logf}, nil
}

func (b *Builder) logf(format string, args ...any) {
	if b.Logf != nil {
		b.Logf(format, args...)
	}
}

// Build returns the path of the bench binary of ref, building it if
// needed. A commit is built in its own temporary worktree and cached by
// SHA; the working tree (ref.Worktree) is built in place into tmpDir and
// never cached, since its content has no name. A peer (ref.Peer) is its
// worker, built from its module in the harness's tree (see buildPeer).
func (b *Builder) Build(ctx context.Context, side string, ref refs.Ref, tmpDir string) (string, error) {
	if ref.Peer != "" {
		return b.buildPeer(ctx, side, ref, tmpDir)
	}
	if ref.Worktree {
		bin := filepath.Join(tmpDir, "bench-"+side+"-worktree")
		b.logf("building %s %s from the working tree...", side, ref)
		if err := goBuild(ctx, b.RepoDir, bin); err != nil {
			return "", err
		}
		return bin, nil
	}
	if b.CacheDir == "" {
		return "", errors.New("build: Builder.CacheDir is empty")
	}
	bin := filepath.Join(b.CacheDir, ref.SHA, "bench")
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		b.logf("using cached %s %s: %s", side, ref, bin)
		return bin, nil
	}
	b.logf("building %s %s...", side, ref)
	start := time.Now()
	if err := b.buildCached(ctx, ref, tmpDir, bin, func(tree, out string) error { return goBuild(ctx, tree, out) }); err != nil {
		return "", err
	}
	b.logf("built %s %s in %s", side, ref, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

// buildCached checks ref's commit out in a temporary worktree and runs
// build(tree, out) there, then moves out to bin: a cancelled or failed
// build never leaves a half-written binary in the cache.
func (b *Builder) buildCached(ctx context.Context, ref refs.Ref, tmpDir, bin string, build func(tree, out string) error) error {
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return fmt.Errorf("build: cache dir: %w", err)
	}
	wt, err := os.MkdirTemp(tmpDir, "worktree-"+ref.Short()+"-")
	if err != nil {
		return fmt.Errorf("build: %w", err)
	}
	// git worktree add wants a path that does not exist yet.
	if err := os.Remove(wt); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	if _, err := refs.Git(ctx, b.RepoDir, "worktree", "add", "--detach", wt, ref.SHA); err != nil {
		return fmt.Errorf("build: checking out %s: %w", ref, err)
	}
	defer func() {
		// A fresh context: the build's may be cancelled, the cleanup must run.
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := refs.Git(cctx, b.RepoDir, "worktree", "remove", "--force", wt); err != nil {
			b.logf("warning: removing worktree %s: %v", wt, err)
			os.RemoveAll(wt)
			_, _ = refs.Git(cctx, b.RepoDir, "worktree", "prune")
		}
	}()
	partial := bin + ".partial"
	if err := build(wt, partial); err != nil {
		os.Remove(partial)
		return fmt.Errorf("build: building %s: %w", ref, err)
	}
	if err := os.Rename(partial, bin); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	return nil
}

func goBuild(ctx context.Context, dir, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/bench")
	cmd.Dir = dir
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("build: go build ./cmd/bench in %s: %w\n%s", dir, err, strings.TrimSpace(string(output)))
	}
	return nil
}
