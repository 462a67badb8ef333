package admincli

import (
	"bufio"
	"fmt"
	"strings"
)

// answerBytesMax bounds the line read as the answer to a confirmation.
const answerBytesMax = 1024

// confirm asks env's person to confirm what: it goes on with --yes (yes
// true), or when stdin is a terminal and the line typed is "yes". Any
// other answer, or a stdin that is not a terminal, is a refusal (exit
// status 3) before anything was changed.
func (c *call) confirm(yes bool, what string) error {
	if yes {
		return nil
	}
	if !c.env.Interactive {
		return withCode(ExitRefused, "relaybus %s: not confirmed: %s\nstdin is not a terminal, so nothing was asked and nothing was changed; pass --yes to confirm", c.name, what)
	}
	fmt.Fprintf(c.env.Stderr, "%s\nType yes to go on: ", what)
	sc := bufio.NewScanner(c.env.Stdin)
	sc.Buffer(make([]byte, 0, 64), answerBytesMax)
	answer := ""
	if sc.Scan() {
		answer = strings.TrimSpace(sc.Text())
	} else {
		fmt.Fprintln(c.env.Stderr) // end of input: end the prompt's line
	}
	if answer != "yes" {
		return withCode(ExitRefused, "relaybus %s: not confirmed (the answer was %q, not yes): nothing was changed", c.name, answer)
	}
	return nil
}
