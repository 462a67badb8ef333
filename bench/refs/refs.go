// Package refs resolves the git revisions a comparison names: tags,
// branches, commit ids, HEAD, the working tree (Worktree), and release
// versions by their "Release: vX.Y.Z" trailer in a clone without tags.
// It is the first step of the harness: refs -> build -> processes ->
// windows -> records -> validate -> result -> report.
package refs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
)

// Worktree is the ref name that selects the working tree as it is,
// uncommitted changes included. Its build is never cached.
const Worktree = "WORKTREE"

// Ref is a resolved git revision.
type Ref struct {
	// Name is the ref as the user gave it ("v0.1.0", "main", "HEAD").
	Name string
	// SHA is the full commit id (for Worktree: HEAD's commit).
	SHA string
	// Worktree: build the working tree, not SHA.
	Worktree bool
	// Dirty: the working tree has uncommitted changes (Worktree only).
	Dirty bool
	// Peer names the peer ("river") when this side is not a relaybus
	// build but a peer worker (see ResolvePeer); SHA is then the commit of
	// the harness's tree the peer is built from.
	Peer string
	// PeerVersion is the peer library's version the side asked for
	// ("river@v0.50.0"); "" builds the version the peer's go.mod pins.
	PeerVersion string
}

// Short is the abbreviated commit id used in progress lines and paths.
func (r Ref) Short() string {
	if len(r.SHA) > 7 {
		return r.SHA[:7]
	}
	return r.SHA
}

// String is "name (abc1234)", with "+dirty" for a changed working tree;
// a peer is "river (peer, tree abc1234)".
func (r Ref) String() string {
	s := fmt.Sprintf("%s (%s)", r.Name, r.Short())
	if r.Peer != "" {
		s = fmt.Sprintf("%s (peer, tree %s)", r.Name, r.Short())
	}
	if r.Dirty {
		s += " +dirty"
	}
	return s
}

var releaseVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+$`)

// Resolve resolves name in the git repository at repoDir: a tag, a
// branch, a commit id, HEAD (the committed HEAD), Worktree, or a peer
// ("river", "river@v0.50.0"; see ResolvePeer). A peer's name shadows a
// branch of the same name: name that one refs/heads/river. A
// vX.Y.Z that is not a tag resolves to the newest commit on HEAD's
// history whose message carries the trailer "Release: vX.Y.Z", so a
// clone without tags still finds releases. A ref that cannot be found
// gets an error that says what to fetch.
func Resolve(ctx context.Context, repoDir, name string) (Ref, error) {
	name = strings.TrimSpace(name)
	if name == "" {
		return Ref{}, errors.New("refs: empty ref")
	}
	if strings.HasPrefix(name, "-") {
		// git would read it as an option.
		return Ref{}, fmt.Errorf("refs: invalid ref %q", name)
	}
	if _, err := Git(ctx, repoDir, "rev-parse", "--git-dir"); err != nil {
		return Ref{}, fmt.Errorf("refs: %s is not a git repository: %w", repoDir, err)
	}
	if p, version, ok := parsePeer(name); ok {
		if strings.HasSuffix(name, "@") {
			if !p.Versioned() {
				return Ref{}, fmt.Errorf("refs: %q: want %s (the peer has no library version to choose)", name, p.Name)
			}
			return Ref{}, fmt.Errorf("refs: %q: want %s or %s@vX.Y.Z", name, p.Name, p.Name)
		}
		return ResolvePeer(ctx, repoDir, p, version)
	}
	if name == Worktree {
		sha, err := Git(ctx, repoDir, "rev-parse", "--verify", "HEAD^{commit}")
		if err != nil {
			return Ref{}, fmt.Errorf("refs: %s: the repository has no commit yet: %w", name, err)
		}
		status, err := Git(ctx, repoDir, "status", "--porcelain", "--untracked-files=normal")
		if err != nil {
			return Ref{}, fmt.Errorf("refs: %s: %w", name, err)
		}
		return Ref{Name: name, SHA: sha, Worktree: true, Dirty: status != ""}, nil
	}
	if sha, err := Git(ctx, repoDir, "rev-parse", "--verify", "--quiet", "--end-of-options", name+"^{commit}"); err == nil && sha != "" {
		return Ref{Name: name, SHA: sha}, nil
	}
	shallow := false
	if out, err := Git(ctx, repoDir, "rev-parse", "--is-shallow-repository"); err == nil && out == "true" {
		shallow = true
	}
	if releaseVersion.MatchString(name) {
		pattern := "^Release: " + regexp.QuoteMeta(name) + "$"
		out, err := Git(ctx, repoDir, "log", "--format=%H", "--extended-regexp", "--grep", pattern, "HEAD")
		if err != nil {
			return Ref{}, fmt.Errorf("refs: searching HEAD's history for the release %s: %w", name, err)
		}
		if shas := strings.Fields(out); len(shas) > 0 {
			// git log lists the newest first; a release is never
			// rewritten, so there should be one, but the newest wins.
			return Ref{Name: name, SHA: shas[0]}, nil
		}
		if shallow {
			return Ref{}, fmt.Errorf("refs: release %s not found: this is a shallow clone that lacks it; run `git fetch --unshallow --tags`", name)
		}
		return Ref{}, fmt.Errorf("refs: release %s not found: no tag %s and no commit with the trailer \"Release: %s\" on HEAD's history; run `git fetch --tags` (or check out a branch that contains the release)", name, name, name)
	}
	if shallow {
		return Ref{}, fmt.Errorf("refs: unknown ref %q: this is a shallow clone that may lack it; run `git fetch --unshallow --tags` (or `git fetch origin %s`)", name, name)
	}
	return Ref{}, fmt.Errorf("refs: unknown ref %q: not a tag, branch or commit of this repository; run `git fetch --tags` (or `git fetch origin %s`) if it exists elsewhere", name, name)
}

// Git runs git in dir and returns its trimmed stdout.
func Git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return strings.TrimSpace(stdout.String()), nil
}
