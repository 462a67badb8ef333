package main

import (
	"runtime/debug"

	"github.com/berkcansavur/relaybus/bench/worker/workerkit"
)

// command is this binary's command line: `river worker` (the protocol 1
// entry point) and `river version`.
var command = workerkit.Command{
	Name:        "river",
	VersionHelp: "the River version this binary was built with",
	Version:     peerVersion,
	Worker:      workerMain,
}

func main() { command.Main() }

// riverModule is the module whose version names this peer.
const riverModule = "github.com/riverqueue/river"

// peerVersion is "river " and the River module version this binary was
// built with, read from its build information.
func peerVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "river (unknown version)"
	}
	return "river " + moduleVersion(bi, riverModule)
}

// moduleVersion returns the version of module path in bi ("(unknown
// version)" when it is not a dependency), following a replacement.
func moduleVersion(bi *debug.BuildInfo, path string) string {
	for _, d := range bi.Deps {
		if d.Path != path {
			continue
		}
		if d.Replace != nil && d.Replace.Version != "" {
			return d.Replace.Version
		}
		if d.Version != "" {
			return d.Version
		}
	}
	return "(unknown version)"
}
