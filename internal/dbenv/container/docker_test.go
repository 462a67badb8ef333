package container

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// TestDockerAvailableUnresponsive: an engine socket that accepts but never
// answers must not hang the decision either.
func TestDockerAvailableUnresponsive(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("DOCKER_HOST", "unix://"+sock)
	start := time.Now()
	err = DockerAvailable(context.Background())
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("DockerAvailable took %v with a silent engine; want under 5 s", took)
	}
	if err == nil {
		t.Error("DockerAvailable = nil for an engine that never answers")
	}
}
