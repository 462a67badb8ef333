package dbenv

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Server settings: what PostgresOptions.Settings may ask for, and what
// dbenv sets itself.

// Limits on PostgresOptions.Settings.
const (
	// settingValueLenMax bounds one server setting's value, in bytes.
	settingValueLenMax = 4096
	// settingsCountMax bounds the number of settings.
	settingsCountMax = 256
)

// settingNamePattern accepts postgresql.conf names, including the
// "extension.name" form of custom settings.
var settingNamePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// managedSettings are chosen by dbenv: where the server listens and keeps its
// files. Overriding them would break the loopback-only rule or the cleanup.
var managedSettings = []string{
	"listen_addresses", "port", "unix_socket_directories", "data_directory",
	"config_file", "hba_file", "ident_file", "external_pid_file",
}

// defaultSettings apply to every server dbenv starts: benchmarks measure
// durable commits.
var defaultSettings = map[string]string{"fsync": "on"}

// effectiveSettings validates the requested settings and adds the defaults.
func effectiveSettings(requested map[string]string) (map[string]string, error) {
	if len(requested) > settingsCountMax {
		return nil, fmt.Errorf("dbenv: %d settings: at most %d", len(requested), settingsCountMax)
	}
	out := maps.Clone(defaultSettings)
	for name, value := range requested {
		if len(name) > 63 || !settingNamePattern.MatchString(name) {
			return nil, fmt.Errorf("dbenv: invalid setting name %q: want %s, at most 63 bytes", name, settingNamePattern)
		}
		if slices.Contains(managedSettings, name) {
			return nil, fmt.Errorf("dbenv: setting %s is managed by dbenv (the server listens on 127.0.0.1 only)", name)
		}
		if len(value) > settingValueLenMax {
			return nil, fmt.Errorf("dbenv: setting %s: value of %d bytes: at most %d", name, len(value), settingValueLenMax)
		}
		if strings.ContainsAny(value, "\x00\r\n") {
			return nil, fmt.Errorf("dbenv: setting %s: value contains a NUL or line break", name)
		}
		out[name] = value
	}
	return out, nil
}

// quoteConfValue quotes a value for postgresql.conf.
func quoteConfValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(v) + "'"
}
