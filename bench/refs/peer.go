package refs

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Peer is another library a comparison can run as one of its sides: a
// worker in its own Go module under bench/peers/<Name> of the harness's
// tree, speaking worker protocol 1, so that the library's module never
// depends on the peer's.
type Peer struct {
	// Name is the side's name on the command line ("river").
	Name string
	// Modules are the peer library's Go modules whose version
	// name@vX.Y.Z selects (the first is the one the version names; the
	// others are released with it, at the same version).
	Modules []string
}

// Peers are the peers the harness knows.
var Peers = []Peer{{
	Name: "river",
	Modules: []string{
		"github.com/riverqueue/river",
		"github.com/riverqueue/river/riverdriver/riverpgxv5",
		"github.com/riverqueue/river/rivertype",
	},
}}

// PeerByName finds a peer by its name.
func PeerByName(name string) (Peer, bool) {
	i := slices.IndexFunc(Peers, func(p Peer) bool { return p.Name == name })
	if i < 0 {
		return Peer{}, false
	}
	return Peers[i], true
}

// Dir is the peer module's directory, relative to the tree's root.
func (p Peer) Dir() string { return path.Join("bench", "peers", p.Name) }

// Inputs are the paths of the harness's tree a peer's build reads,
// relative to its root: the peer module and the main module's packages
// it imports (through its replace directive), with the main module's
// go.mod and go.sum, whose requirements take part in the build. A peer
// whose inputs have uncommitted changes is built from the working tree.
// The peer module's tests check this list against `go list -deps`.
// "relaybus" stands for the library's root package (its retry schedule
// and limits) and relaybus/batch, which it imports; a path names a whole
// directory tree, so a change to a store marks the peer changed too,
// which only costs a build.
func (p Peer) Inputs() []string {
	return []string{p.Dir(), "bench/protocol", "bench/record", "bench/stats", "bench/worker/workerkit", "relaybus", "go.mod", "go.sum"}
}

// peerVersion is the version a peer side may ask for: a release tag,
// with an optional pre-release suffix. It is passed to `go mod edit`,
// so nothing else may get through.
var peerVersion = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$`)

// parsePeer splits "river" or "river@v0.50.0"; ok is false for a name
// that names no peer.
func parsePeer(name string) (peer Peer, version string, ok bool) {
	base, version, _ := strings.Cut(name, "@")
	peer, ok = PeerByName(base)
	return peer, version, ok
}

// ResolvePeer resolves a peer side: the peer module of the harness's
// tree at repoDir, at HEAD's commit, or the working tree when the
// peer's inputs (Peer.Inputs) have uncommitted changes there; version
// "" builds the library version the peer's go.mod pins, else that
// release of the library (name@version).
func ResolvePeer(ctx context.Context, repoDir string, p Peer, version string) (Ref, error) {
	name := p.Name
	if version != "" {
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
