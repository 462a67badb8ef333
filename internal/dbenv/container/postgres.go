package container

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/berkcansavur/relaybus/internal/dbenv"
)

// PostgreSQL in a container (dbenv's provider testcontainers).

// containerStopTimeout is what the engine gives postgres to shut down before
// it kills the container (Restart and Stop).
const containerStopTimeout = 30 * time.Second

// containerServer is a postgres container whose port 5432 is bound to a
// fixed port on 127.0.0.1, so that the address survives Restart.
type containerServer struct {
	ctr   *tcpostgres.PostgresContainer
	image string
	logf  func(string, ...any)
	dsn   string
}

// StartPostgres implements dbenv.Containers: settings are dbenv's, already
// validated and with fsync set.
func (provider) StartPostgres(ctx context.Context, image string, settings map[string]string, logf func(string, ...any)) (string, dbenv.Server, error) {
	if image == "" {
		image = postgresImage()
	}
	if err := DockerAvailable(ctx); err != nil {
		return "", nil, fmt.Errorf("dbenv: provider testcontainers: %w", err)
	}
	prepareTestcontainersEnv(ctx, logf)
	if err := ensureImage(ctx, image, logf); err != nil {
		return "", nil, fmt.Errorf("dbenv: provider testcontainers: %w", err)
	}

	// The module starts postgres with fsync=off; the command is replaced so
	// that the server runs as benchmarks need (fsync on unless requested).
	cmd := []string{"postgres"}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		cmd = append(cmd, "-c", name+"="+settings[name])
	}
	start := time.Now()
	var port int
	s, err := onFreePort(logf, func(p int) (*containerServer, error) {
		port = p
		return runContainer(ctx, image, cmd, p, logf)
	})
	if err != nil {
		return "", nil, err
	}
	logf("dbenv: container %s on 127.0.0.1:%d ready after %v", image, port, time.Since(start).Round(time.Millisecond))
	return s.dsn, s, nil
}

// postgresImage is the image when the caller names none: RELAYBUS_PG_IMAGE,
// else DefaultImage.
func postgresImage() string {
	if img := os.Getenv(EnvImage); img != "" {
		return img
	}
	return DefaultImage
}

func runContainer(ctx context.Context, image string, cmd []string, port int, logf func(string, ...any)) (_ *containerServer, err error) {
	ctr, err := tcpostgres.Run(ctx, image,
		testcontainers.WithLogger(logfLogger(logf)),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.WithDatabase("postgres"),
		testcontainers.WithCmd(cmd...),
		tcpostgres.BasicWaitStrategies(),
		loopbackPort("5432/tcp", port),
	)
	s := &containerServer{ctr: ctr, image: image, logf: logf}
	defer func() {
		if err != nil && ctr != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: image %s: %w", image, err)
	}
	host, err := ctr.Host(ctx)
	if err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: host: %w", err)
	}
	if host != "127.0.0.1" {
		return nil, fmt.Errorf("dbenv: provider testcontainers: the server's host is %q, not 127.0.0.1; "+
			"set TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1", host)
	}
	mapped, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: mapped port: %w", err)
	}
	if int(mapped.Num()) != port {
		return nil, fmt.Errorf("dbenv: provider testcontainers: port 5432 mapped to %d, not the requested %d", mapped.Num(), port)
	}
	s.dsn = fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := dbenv.WaitReady(ctx, s.dsn); err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: %w", err)
	}
	return s, nil
}

func (s *containerServer) Source() string { return s.image }

func (s *containerServer) Restart(ctx context.Context) error {
	start := time.Now()
	timeout := containerStopTimeout
	if err := s.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("dbenv: restart: stop container: %w", err)
	}
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("dbenv: restart: start container: %w", err)
	}
	if err := dbenv.WaitReady(ctx, s.dsn); err != nil {
		return fmt.Errorf("dbenv: restart: %w", err)
	}
	s.logf("dbenv: container restarted in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// crashCommand signals the postmaster of the container's data directory.
const crashCommand = `kill -QUIT "$(head -n 1 "${PGDATA:-/var/lib/postgresql/data}/postmaster.pid")"`

// Crash sends SIGQUIT to the container's postmaster (its pid from
// postmaster.pid: PID 1 is the entrypoint script, which waits for it): an
// immediate shutdown, after which the entrypoint and so the container
// exit; then it starts the container again.
func (s *containerServer) Crash(ctx context.Context) error {
	start := time.Now()
	code, _, err := s.ctr.Exec(ctx, []string{"sh", "-c", crashCommand})
	if err != nil {
		return fmt.Errorf("dbenv: crash: signal postgres: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("dbenv: crash: sh -c %q exited %d", crashCommand, code)
	}
	// Wait for the container to exit, then start it again (Start on a
	// running container would do nothing).
	deadline := time.Now().Add(containerStopTimeout)
	for {
		st, err := s.ctr.State(ctx)
		if err != nil {
			return fmt.Errorf("dbenv: crash: container state: %w", err)
		}
		if !st.Running {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dbenv: crash: container still running %v after SIGQUIT", containerStopTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("dbenv: crash: start container: %w", err)
	}
	if err := dbenv.WaitReady(ctx, s.dsn); err != nil {
		return fmt.Errorf("dbenv: crash: %w", err)
	}
	s.logf("dbenv: container crashed and restarted in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// Stop removes the container and its anonymous volumes (the data).
func (s *containerServer) Stop(ctx context.Context) error {
	if err := s.ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("dbenv: remove container: %w", err)
	}
	return nil
}
