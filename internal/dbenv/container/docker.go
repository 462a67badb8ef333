package container

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dockerPingTimeout bounds DockerAvailable: the auto provider asks it before
// anything else, so it must never hang.
const dockerPingTimeout = 1500 * time.Millisecond

// DockerAvailable reports whether a Docker engine answers a ping; the error
// says why not. It takes at most about 1.5 s and never hangs.
//
// The engine is found like the Docker CLI and testcontainers-go find it:
// DOCKER_HOST, else tc.host or docker.host in ~/.testcontainers.properties,
// else /var/run/docker.sock, else the rootless sockets. Docker CLI contexts
// are not read: set DOCKER_HOST to use one.
func DockerAvailable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	host, err := dockerHost()
	if err != nil {
		return err
	}
	resp, err := dockerGet(ctx, host, "/_ping")
	if err != nil {
		return fmt.Errorf("dbenv: no Docker engine at %s: %w", host, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("dbenv: Docker engine at %s answers ping with %s: %s", host, resp.Status, body)
	}
	return nil
}

// dockerHost returns the engine address as a URL string.
func dockerHost() (string, error) {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h, nil
	}
	home, _ := os.UserHomeDir()
	if home != "" {
		if h := propertiesValue(filepath.Join(home, ".testcontainers.properties"), "tc.host", "docker.host"); h != "" {
			return h, nil
		}
	}
	candidates := []string{"/var/run/docker.sock"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		candidates = append(candidates, filepath.Join(d, "docker.sock"))
	}
	if home != "" {
		candidates = append(candidates, filepath.Join(home, ".docker", "run", "docker.sock"))
	}
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && st.Mode()&os.ModeSocket != 0 {
			return "unix://" + c, nil
		}
	}
	return "", fmt.Errorf("dbenv: no Docker engine: DOCKER_HOST is not set and no socket at %s; "+
		"start one (apt-get install docker.io; dockerd &) or use the local provider", strings.Join(candidates, ", "))
}

// propertiesValue returns the first of keys set in a Java-style properties
// file, or "".
func propertiesValue(path string, keys ...string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	values := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			values[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	for _, k := range keys {
		if v := values[k]; v != "" {
			return v
		}
	}
	return ""
}

// dockerGet sends one GET to the engine API over a unix socket or TCP.
func dockerGet(ctx context.Context, host, path string) (*http.Response, error) {
	return dockerRequest(ctx, host, http.MethodGet, path)
}

// dockerRequest sends one request without a body to the engine API.
func dockerRequest(ctx context.Context, host, method, path string) (*http.Response, error) {
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("parse DOCKER_HOST: %w", err)
	}
	var network, addr string
	switch u.Scheme {
	case "unix":
		network, addr = "unix", u.Path
	case "tcp", "http":
		network, addr = "tcp", u.Host
	default:
		return nil, fmt.Errorf("unsupported scheme %q (want unix:// or tcp://; TLS engines: use Testcontainers' own configuration)", u.Scheme)
	}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		DisableKeepAlives: true,
	}
	defer transport.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, err
	}
	return resp, nil
}
