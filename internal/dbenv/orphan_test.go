package dbenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// helperEnv makes the test binary act as a process that starts a local
// server, prints its pid and directory, and waits to be killed.
const helperEnv = "DBENV_TEST_ORPHAN_HELPER"

func TestOrphanHelper(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("only runs as the child process of TestKilledOwnerTakesServerDown")
	}
	pg, err := StartPostgres(context.Background(), PostgresOptions{Provider: ProviderLocal})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	s := pg.backend.(*localServer)
	fmt.Printf("started %d %s\n", s.cmd.Process.Pid, s.dir)
	time.Sleep(time.Minute) // killed long before
}

// TestKilledOwnerTakesServerDown kills (SIGKILL: no handler runs) a process
// that started a local server and checks what doc.go promises: the server
// exits, and the next local start removes the directory left behind. The
// bound on the wait is a "does not hang" bound, not a speed target.
func TestKilledOwnerTakesServerDown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestOrphanHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var serverPid int
	var dir string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "started "); ok {
			pidText, d, _ := strings.Cut(rest, " ")
			serverPid, _ = strconv.Atoi(pidText)
			dir = d
			break
		}
		if strings.HasPrefix(line, "error") {
			t.Fatal(line)
		}
	}
	if serverPid == 0 {
		_ = cmd.Process.Kill()
		t.Fatalf("helper did not report a server (%v)", sc.Err())
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	const exitBound = 30 * time.Second
	deadline := time.Now().Add(exitBound)
	for processAlive(serverPid) {
		if time.Now().After(deadline) {
			t.Fatalf("server %d still running %v after its owner was killed", serverPid, exitBound)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A local start in a parallel test may sweep the directory first; either
	// way it must be gone after a sweep.
	if _, err := os.Stat(filepath.Join(dir, ownerFile)); err != nil {
		t.Logf("directory already swept: %v", err)
	}
	sweepStaleDirs(t.Logf)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sweepStaleDirs left %s: %v", dir, err)
	}
}
