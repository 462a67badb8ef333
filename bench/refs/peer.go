package refs

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"

	"github.com/berkcansavur/relaybus/bench/peer"
)

// peerVersion is the version a peer side may ask for: a release tag,
// with an optional pre-release suffix. It is passed to `go mod edit`,
// so nothing else may get through.
var peerVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// parsePeer splits "river" or "river@v0.50.0"; ok is false for a name
// that names no peer (peer.Peers).
func parsePeer(name string) (p *peer.Descriptor, version string, ok bool) {
	base, version, _ := strings.Cut(name, "@")
	p, ok = peer.ByName(base)
	return p, version, ok
}

// ResolvePeer resolves a peer side: the peer module of the harness's
// tree at repoDir, at HEAD's commit, or the working tree when the
// peer's inputs (peer.Descriptor.Inputs) have uncommitted changes there;
// version "" builds the library version the peer's go.mod pins, else
// that release of the library (name@version), for a peer that has one.
func ResolvePeer(ctx context.Context, repoDir string, p *peer.Descriptor, version string) (Ref, error) {
	name := p.Name
	if version != "" {
		if !p.Versioned() {
			return Ref{}, fmt.Errorf("refs: %s@%s: the %s peer has no library version to choose; name it %s", p.Name, version, p.Name, p.Name)
		}
		if !peerVersion.MatchString(version) {
			return Ref{}, fmt.Errorf("refs: %s@%s: want a release version like %s@v1.2.3", p.Name, version, p.Name)
		}
		name += "@" + version
	}
	sha, err := Git(ctx, repoDir, "rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return Ref{}, fmt.Errorf("refs: %s: the repository has no commit yet: %w", name, err)
	}
	modFile := path.Join(p.Dir(), "go.mod")
	if _, err := Git(ctx, repoDir, "cat-file", "-e", "HEAD:"+modFile); err != nil {
		return Ref{}, fmt.Errorf("refs: %s: HEAD has no %s: the peer is built from the harness's own tree, so run the harness from a commit that has it", name, modFile)
	}
	args := append([]string{"status", "--porcelain", "--untracked-files=normal", "--"}, p.Inputs()...)
	status, err := Git(ctx, repoDir, args...)
	if err != nil {
		return Ref{}, fmt.Errorf("refs: %s: %w", name, err)
	}
	dirty := status != ""
	return Ref{Name: name, SHA: sha, Worktree: dirty, Dirty: dirty, Peer: p.Name, PeerVersion: version}, nil
}
