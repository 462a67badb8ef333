package dbenv

import (
	"fmt"
	"strings"
)

// Provider names where a PostgreSQL server comes from.
type Provider string

const (
	// ProviderAuto picks Testcontainers when a Docker engine answers, else
	// local server binaries.
	ProviderAuto Provider = "auto"
	// ProviderLocal runs a throwaway cluster from the initdb and postgres
	// binaries found on this machine.
	ProviderLocal Provider = "local"
	// ProviderTestcontainers runs the server in a container through
	// testcontainers-go.
	ProviderTestcontainers Provider = "testcontainers"
	// ProviderDSN uses a server the user gives by its connection string.
	ProviderDSN Provider = "dsn"
)

// ParseProvider turns a flag or environment value into a Provider. The empty
// string means ProviderAuto; case and surrounding spaces are ignored.
func ParseProvider(s string) (Provider, error) {
	switch p := Provider(strings.ToLower(strings.TrimSpace(s))); p {
	case "", ProviderAuto:
		return ProviderAuto, nil
	case ProviderLocal, ProviderTestcontainers, ProviderDSN:
		return p, nil
	default:
		return "", fmt.Errorf("dbenv: unknown provider %q: want one of auto, local, testcontainers, dsn", s)
	}
}
