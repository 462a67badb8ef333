package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/berkcansavur/relaybus/bench/peer"
	"github.com/berkcansavur/relaybus/bench/refs"
)

// pinnedKey names the cache entry of a peer built at the library
// version its go.mod pins.
const pinnedKey = "pinned"

// buildPeer builds a peer's worker: `go build` in bench/peers/<name> of
// the harness's tree, at ref.SHA in a temporary worktree, cached by that
// commit and the library version (CacheDir/peers/<name>/<sha>-<version
// or "pinned">/<name>), or of the working tree in place when ref.Worktree
// (never cached). The peer module's replace directive makes it build
// against that same tree's main-module packages (peer.Descriptor.Inputs), so
// an older ref, which may predate the peer, is never needed.
//
// With ref.PeerVersion the module is copied, its requirements of the
// peer library's modules are set to that version (go mod edit, then go
// mod tidy, which may download), and the copy is built. An older
// release's API may differ from the one the peer was written for: the
// build error then says so.
func (b *Builder) buildPeer(ctx context.Context, side string, ref refs.Ref, tmpDir string) (string, error) {
	p, ok := peer.ByName(ref.Peer)
	if !ok {
		return "", fmt.Errorf("build: unknown peer %q", ref.Peer)
	}
	if ref.Worktree {
		bin := filepath.Join(tmpDir, "peer-"+p.Name+"-"+side+"-worktree")
		b.logf("building %s %s from the working tree...", side, ref)
		if err := buildPeerIn(ctx, b.RepoDir, p, ref.PeerVersion, tmpDir, bin); err != nil {
			return "", fmt.Errorf("build: building %s: %w", ref, err)
		}
		return bin, nil
	}
	if b.CacheDir == "" {
		return "", errors.New("build: Builder.CacheDir is empty")
	}
	cache, err := filepath.Abs(b.CacheDir)
	if err != nil {
		return "", fmt.Errorf("build: %w", err)
	}
	key := ref.PeerVersion
	if key == "" {
		key = pinnedKey
	}
	bin := filepath.Join(cache, "peers", p.Name, ref.SHA+"-"+key, p.Name)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		b.logf("using cached %s %s: %s", side, ref, bin)
		return bin, nil
	}
	b.logf("building %s %s...", side, ref)
	start := time.Now()
	err = b.buildCached(ctx, ref, tmpDir, bin, func(tree, out string) error {
		return buildPeerIn(ctx, tree, p, ref.PeerVersion, tmpDir, out)
	})
	if err != nil {
		return "", err
	}
	b.logf("built %s %s in %s", side, ref, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

// buildPeerIn builds peer p of the tree at tree into out, at the
// library version its go.mod pins (version "") or at version.
func buildPeerIn(ctx context.Context, tree string, p *peer.Descriptor, version, tmpDir, out string) error {
	// Absolute paths: go runs in other directories, and a copied module's
	// replace directive must point back at this tree.
	dir, err := filepath.Abs(filepath.Join(tree, filepath.FromSlash(p.Dir())))
	if err != nil {
		return err
	}
	if out, err = filepath.Abs(out); err != nil {
		return err
	}
	if version == "" {
		_, err := goCmd(ctx, dir, "build", "-o", out, ".")
		return err
	}
	if !p.Versioned() {
		return fmt.Errorf("the %s peer has no library version to choose (%s)", p.Name, version)
	}
	work, err := os.MkdirTemp(tmpDir, "peer-"+p.Name+"-"+version+"-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := copyModule(dir, work); err != nil {
		return err
	}
	edits, err := versionEdits(ctx, dir, work, p, version)
	if err != nil {
		return err
	}
	if _, err := goCmd(ctx, work, append([]string{"mod", "edit"}, edits...)...); err != nil {
		return err
	}
	if _, err := goCmd(ctx, work, "mod", "tidy"); err != nil {
		return fmt.Errorf("%s %s: %w", p.Modules[0], version, err)
	}
	if _, err := goCmd(ctx, work, "build", "-o", out, "."); err != nil {
		return fmt.Errorf("the %s peer does not build against %s %s (its API may differ from the one the peer was written for): %w",
			p.Name, p.Modules[0], version, err)
	}
	return nil
}

// goModJSON is the part of `go mod edit -json` that versionEdits reads.
type goModJSON struct {
	Require []struct {
		Path     string
		Version  string
		Indirect bool
	}
	Replace []struct {
		Old struct{ Path, Version string }
		New struct{ Path, Version string }
	}
}

// versionEdits are the `go mod edit` flags that make the module copied
// from dir into work build peer p at version: every requirement of one
// of p.Modules set to version, the other modules of the library that it
// requires only indirectly dropped (go mod tidy adds them back at the
// versions the release needs), and replace directives with a relative
// path (the peer's points at the tree's root) made absolute, since the
// copy lives elsewhere.
func versionEdits(ctx context.Context, dir, work string, p *peer.Descriptor, version string) ([]string, error) {
	out, err := goCmd(ctx, work, "mod", "edit", "-json")
	if err != nil {
		return nil, err
	}
	var mod goModJSON
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, fmt.Errorf("reading %s/go.mod: %w", dir, err)
	}
	var edits []string
	library := p.Modules[0]
	for _, r := range mod.Require {
		switch {
		case slices.Contains(p.Modules, r.Path):
			edits = append(edits, "-require="+r.Path+"@"+version)
		case r.Indirect && strings.HasPrefix(r.Path, library+"/"):
			edits = append(edits, "-droprequire="+r.Path)
		}
	}
	if len(edits) == 0 {
		return nil, fmt.Errorf("%s/go.mod requires none of %s", dir, strings.Join(p.Modules, ", "))
	}
	for _, r := range mod.Replace {
		if r.New.Version != "" || !(strings.HasPrefix(r.New.Path, "./") || strings.HasPrefix(r.New.Path, "../")) {
			continue
		}
		abs := filepath.Join(dir, filepath.FromSlash(r.New.Path))
		old := r.Old.Path
		if r.Old.Version != "" {
			old += "@" + r.Old.Version
		}
		edits = append(edits, "-replace="+old+"="+abs)
	}
	return edits, nil
}

// copyModule copies a module's go.mod, go.sum and Go files (not its
// subdirectories, nor a binary left there by a local build) into work.
func copyModule(dir, work string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !(name == "go.mod" || name == "go.sum" || strings.HasSuffix(name, ".go")) {
			continue
		}
		if err := copyFile(filepath.Join(dir, name), filepath.Join(work, name)); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// goCmd runs the go command in dir and returns its stdout; its error
// carries the command's output.
func goCmd(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()+stdout.String()))
	}
	return []byte(stdout.String()), nil
}
