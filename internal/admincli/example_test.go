package admincli_test

import (
	"context"
	"fmt"
	"os"

	"github.com/berkcansavur/relaybus/internal/admincli"
)

// Main is the whole command: cmd/relaybus hands it the process's
// arguments and streams and exits with what it returns. A usage error
// says what is wrong and exits 2, before any database is touched.
func ExampleMain() {
	code := admincli.Main(context.Background(), []string{"purge", "--dsn", "postgres://app@db.internal/app"}, admincli.Env{
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stdout, Getenv: os.Getenv,
	})
	fmt.Println("exit status", code)
	// Output:
	// relaybus purge: nothing to purge: give --dead, --completed or both (see relaybus purge --help)
	// exit status 2
}
