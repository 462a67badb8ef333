// Package container is dbenv's container provider: PostgreSQL and MongoDB
// servers in Docker containers, through testcontainers-go. Importing it
// registers it with dbenv (dbenv.RegisterContainers), as a database/sql
// driver registers itself:
//
//	import _ "github.com/berkcansavur/relaybus/internal/dbenv/container"
//
// after which dbenv's testcontainers provider works, the auto provider
// prefers a container where a Docker engine answers, and dbenv.StartMongo
// without a URI starts a replica set in a container. The harness (cmd/bench)
// and the harness's tests import it; the library's tests (relaybus/...) do
// not, so that a module requiring relaybus gets no Docker, moby or
// Testcontainers module in its go.sum. CI's Testcontainers step
// (scripts/ci-testcontainers) runs this package's tests and the harness's
// on containers, and hands the library's tests a container's DSN through
// RELAYBUS_TEST_DATABASE_URL, started by internal/dbenv/cmd/dbserver.
//
// Every container's port is bound to a port chosen here on 127.0.0.1 only,
// so that Restart keeps the address.
//
// # Machines that are containers
//
// Where /.dockerenv exists, testcontainers-go connects to mapped ports
// through the default gateway; this package sets TESTCONTAINERS_HOST_OVERRIDE
// to 127.0.0.1 when it is unset, and refuses a server whose host is not
// 127.0.0.1. A container outlives a killed process unless Ryuk
// (testcontainers-go's reaper) runs; Ryuk is disabled only when its image
// is not present.
package container

// Containers through testcontainers-go, for both servers: the environment
// it reads, the images it needs, and the loopback-only port binding.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/testcontainers/testcontainers-go"

	"github.com/berkcansavur/relaybus/internal/dbenv"
)

func init() { dbenv.RegisterContainers(provider{}) }

// provider implements dbenv.Containers.
type provider struct{}

func (provider) Available(ctx context.Context) error { return DockerAvailable(ctx) }

// Environment variables read by this package.
const (
	// EnvImage overrides the PostgreSQL image (DefaultImage).
	EnvImage = "RELAYBUS_PG_IMAGE"
	// EnvMongoImage overrides the MongoDB image (DefaultMongoImage).
	EnvMongoImage = "RELAYBUS_MONGO_IMAGE"
)

// Default images, used when neither the options nor the environment name
// one.
const (
	DefaultImage      = "postgres:17"
	DefaultMongoImage = "mongo:7"
)

// portAttempts bounds the retries when the free port picked for a
// container is taken before the engine binds it.
const portAttempts = 3

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

// loopbackPort binds the container's port (as "5432/tcp") to hostPort on
// 127.0.0.1 only, at a port chosen here: the engine would otherwise publish
// it on every interface, and pick a new port at every start, breaking
// Restart's promise of the same address.
func loopbackPort(containerPort string, hostPort int) testcontainers.CustomizeRequestOption {
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		hc.PortBindings = network.PortMap{
			network.MustParsePort(containerPort): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: strconv.Itoa(hostPort)}},
		}
	})
}

// onFreePort runs start on a free loopback port, and again on another (at
// most portAttempts times) when the engine finds the port taken: it is
// free when freePort returns, not necessarily when the engine binds it.
func onFreePort[T any](logf func(string, ...any), start func(port int) (T, error)) (T, error) {
	var zero T
	var lastErr error
	for range portAttempts {
		port, err := dbenv.FreePort()
		if err != nil {
			return zero, err
		}
		v, err := start(port)
		if err == nil {
			return v, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "already allocated") && !strings.Contains(err.Error(), "address already in use") {
			break
		}
		logf("dbenv: port %d taken before the engine bound it; trying another", port)
	}
	return zero, lastErr
}
