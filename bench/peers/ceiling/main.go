package main

import "github.com/berkcansavur/relaybus/bench/worker/workerkit"

// command is this binary's command line: `ceiling worker` (the protocol
// 1 entry point) and `ceiling version`.
var command = workerkit.Command{
	Name:        peerName,
	VersionHelp: "this peer's version",
	Version:     func() string { return peerVersion },
	Worker:      workerMain,
}

func main() { command.Main() }
