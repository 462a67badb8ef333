package dbenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// containerStopTimeout is what the engine gives postgres to shut down before
// it kills the container (Restart and Stop).
const containerStopTimeout = 30 * time.Second

// ryukImagePrefix is the reaper image testcontainers-go starts unless
// TESTCONTAINERS_RYUK_DISABLED is true.
const ryukImagePrefix = "testcontainers/ryuk"

// tcEnvOnce guards the environment testcontainers-go reads once, on first
// use: it must be set before anything in testcontainers-go runs.
var tcEnvOnce sync.Once

// prepareTestcontainersEnv sets what testcontainers-go needs on machines
// like this one:
//   - in a container (/.dockerenv) testcontainers-go connects to mapped ports
//     through the default gateway; the ports are bound on 127.0.0.1, so
//     TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 when the user has not set it;
//   - with no reaper (Ryuk) image present and no registry to pull it from,
//     TESTCONTAINERS_RYUK_DISABLED=true when the user has not set it; Stop
//     removes the container instead.
func prepareTestcontainersEnv(ctx context.Context, logf func(string, ...any)) {
	tcEnvOnce.Do(func() {
		if _, set := os.LookupEnv("TESTCONTAINERS_HOST_OVERRIDE"); !set {
			if _, err := os.Stat("/.dockerenv"); err == nil {
				os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
				logf("dbenv: /.dockerenv exists: set TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 (testcontainers-go would use the default gateway)")
			}
		}
		if _, set := os.LookupEnv("TESTCONTAINERS_RYUK_DISABLED"); !set {
			present, err := imagePresent(ctx, ryukImagePrefix)
			switch {
			case err != nil:
				logf("dbenv: cannot list images (%v); leaving Ryuk enabled", err)
			case !present:
				os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
				logf("dbenv: no %s image present: set TESTCONTAINERS_RYUK_DISABLED=true (Stop removes the container)", ryukImagePrefix)
			}
		}
	})
}

// imagePresent reports whether the engine holds an image whose repository
// is repo (any tag).
func imagePresent(ctx context.Context, repo string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	host, err := dockerHost()
	if err != nil {
		return false, err
	}
	filter, _ := json.Marshal(map[string][]string{"reference": {repo}})
	resp, err := dockerGet(ctx, host, "/images/json?filters="+url.QueryEscape(string(filter)))
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return false, fmt.Errorf("list images: %s: %s", resp.Status, body)
	}
	var images []json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&images); err != nil {
		return false, fmt.Errorf("list images: %w", err)
	}
	return len(images) > 0, nil
}

// imagePullTimeout bounds one pull of a missing image.
const imagePullTimeout = 10 * time.Minute

// ensureImage pulls image when the engine does not hold it, once and within
// imagePullTimeout. testcontainers-go would retry a failing pull with
// exponential backoff for up to 15 minutes, which on a machine without a
// registry looks like a hang; here the failure comes back at once and says
// what to do.
func ensureImage(ctx context.Context, image string, logf func(string, ...any)) error {
	host, err := dockerHost()
	if err != nil {
		return err
	}
	inspectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := dockerGet(inspectCtx, host, "/images/"+url.PathEscape(image)+"/json")
	if err != nil {
		return fmt.Errorf("inspect image %s: %w", image, err)
	}
	resp.Body.Close()
	if resp.StatusCode == 200 {
		return nil
	}
	if resp.StatusCode != 404 {
		return fmt.Errorf("inspect image %s: %s", image, resp.Status)
	}
	logf("dbenv: image %s not present; pulling it (at most %v)", image, imagePullTimeout)
	start := time.Now()
	pullCtx, cancelPull := context.WithTimeout(ctx, imagePullTimeout)
	defer cancelPull()
	resp, err = dockerRequest(pullCtx, host, "POST", "/images/create?fromImage="+url.QueryEscape(image))
	if err == nil {
		defer resp.Body.Close()
		err = pullResult(resp)
	}
	if err != nil {
		return fmt.Errorf("image %s is not present and cannot be pulled (%v); build one without a registry "+
			"with scripts/postgres-image and set %s=relaybus/postgres:15-debian", image, err, EnvImage)
	}
	logf("dbenv: pulled %s in %v", image, time.Since(start).Round(time.Second))
	return nil
}

// pullResult reads a pull's progress stream to its end: the engine reports
// a failure inside the stream, with status 200.
func pullResult(resp *http.Response) error {
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var msg struct {
			Error string `json:"error"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if msg.Error != "" {
			return errors.New(msg.Error)
		}
	}
}

// logfLogger adapts a Logf to testcontainers-go's logger.
type logfLogger func(string, ...any)

func (l logfLogger) Printf(format string, args ...any) { l(format, args...) }

// containerServer is a postgres container whose port 5432 is bound to a
// fixed port on 127.0.0.1, so that the address survives Restart.
type containerServer struct {
	ctr   *tcpostgres.PostgresContainer
	image string
	logf  func(string, ...any)
	dsn   string
}

func startContainer(ctx context.Context, image string, settings map[string]string, logf func(string, ...any)) (*Postgres, error) {
	if err := DockerAvailable(ctx); err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: %w", err)
	}
	prepareTestcontainersEnv(ctx, logf)
	if err := ensureImage(ctx, image, logf); err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: %w", err)
	}

	// The module starts postgres with fsync=off; the command is replaced so
	// that the server runs as benchmarks need (fsync on unless requested).
	cmd := []string{"postgres"}
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		cmd = append(cmd, "-c", name+"="+settings[name])
	}
	start := time.Now()
	var lastErr error
	for range localPortAttempts {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s, err := runContainer(ctx, image, cmd, port, logf)
		if err == nil {
			logf("dbenv: container %s on 127.0.0.1:%d ready after %v", image, port, time.Since(start).Round(time.Millisecond))
			return &Postgres{provider: ProviderTestcontainers, adminDSN: s.dsn, backend: s, settings: settings, logf: logf}, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "already allocated") && !strings.Contains(err.Error(), "address already in use") {
			break
		}
		logf("dbenv: port %d taken before the engine bound it; trying another", port)
	}
	return nil, lastErr
}

func runContainer(ctx context.Context, image string, cmd []string, port int, logf func(string, ...any)) (_ *containerServer, err error) {
	hostPort := strconv.Itoa(port)
	ctr, err := tcpostgres.Run(ctx, image,
		testcontainers.WithLogger(logfLogger(logf)),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.WithDatabase("postgres"),
		testcontainers.WithCmd(cmd...),
		tcpostgres.BasicWaitStrategies(),
		// Bind on loopback only, at a port chosen here: the engine would
		// otherwise publish on all interfaces, and pick a new port on every
		// start, breaking Restart's promise of the same address.
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: hostPort}},
			}
		}),
	)
	s := &containerServer{ctr: ctr, image: image, logf: logf}
	defer func() {
		if err != nil && ctr != nil {
			_ = s.stop(context.WithoutCancel(ctx))
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
	if err := waitReady(ctx, s.dsn, nil, nil); err != nil {
		return nil, fmt.Errorf("dbenv: provider testcontainers: %w", err)
	}
	return s, nil
}

func (s *containerServer) source() string { return s.image }

func (s *containerServer) restart(ctx context.Context) error {
	start := time.Now()
	timeout := containerStopTimeout
	if err := s.ctr.Stop(ctx, &timeout); err != nil {
		return fmt.Errorf("dbenv: restart: stop container: %w", err)
	}
	if err := s.ctr.Start(ctx); err != nil {
		return fmt.Errorf("dbenv: restart: start container: %w", err)
	}
	if err := waitReady(ctx, s.dsn, nil, nil); err != nil {
		return fmt.Errorf("dbenv: restart: %w", err)
	}
	s.logf("dbenv: container restarted in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// stop removes the container and its anonymous volumes (the data).
func (s *containerServer) stop(ctx context.Context) error {
	if err := s.ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("dbenv: remove container: %w", err)
	}
	return nil
}
