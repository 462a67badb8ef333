package dbenv

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestParseProvider(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Provider{
		"": ProviderAuto, "auto": ProviderAuto, " Local ": ProviderLocal,
		"testcontainers": ProviderTestcontainers, "DSN": ProviderDSN,
	} {
		got, err := ParseProvider(in)
		if err != nil || got != want {
			t.Errorf("ParseProvider(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"docker", "local,dsn", "autox"} {
		if _, err := ParseProvider(in); err == nil || !strings.HasPrefix(err.Error(), "dbenv: ") {
			t.Errorf("ParseProvider(%q) error = %v; want a dbenv error", in, err)
		}
	}
}

func TestValidateDatabaseName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "_", "rbt_x_0123abcd", strings.Repeat("a", 63)} {
		if err := ValidateDatabaseName(ok); err != nil {
			t.Errorf("ValidateDatabaseName(%q) = %v; want nil", ok, err)
		}
	}
	bad := []string{"", "A", "1abc", "a-b", "a b", `a"b`, "a;drop", strings.Repeat("a", 64), "postgres", "template1", "é"}
	// An unreachable server: a name must be rejected before any connection.
	p := &Postgres{adminDSN: "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"}
	for _, name := range bad {
		if err := ValidateDatabaseName(name); err == nil {
			t.Errorf("ValidateDatabaseName(%q) = nil; want an error", name)
		}
		if _, err := p.CreateDatabase(context.Background(), name); err == nil || !strings.Contains(err.Error(), "invalid database name") {
			t.Errorf("CreateDatabase(%q) error = %v; want invalid database name", name, err)
		}
		if err := p.DropDatabase(context.Background(), name); err == nil || !strings.Contains(err.Error(), "invalid database name") {
			t.Errorf("DropDatabase(%q) error = %v; want invalid database name", name, err)
		}
	}
}

func TestEffectiveSettings(t *testing.T) {
	t.Parallel()
	got, err := effectiveSettings(map[string]string{"autovacuum": "off", "pg_stat_statements.track": "all"})
	if err != nil {
		t.Fatal(err)
	}
	if got["fsync"] != "on" || got["autovacuum"] != "off" || got["pg_stat_statements.track"] != "all" {
		t.Errorf("effectiveSettings = %v; want fsync=on plus the requested ones", got)
	}
	if got, _ := effectiveSettings(map[string]string{"fsync": "off"}); got["fsync"] != "off" {
		t.Errorf("an explicit fsync=off was not kept: %v", got)
	}
	for name, value := range map[string]string{
		"listen_addresses": "*", "port": "5432", "Fsync": "on", "a b": "1", "x;y": "1",
		"work_mem": "1\nfsync=off", strings.Repeat("a", 64): "1", "shared_buffers": strings.Repeat("1", settingValueLenMax+1),
	} {
		if _, err := effectiveSettings(map[string]string{name: value}); err == nil {
			t.Errorf("effectiveSettings(%q=%.20q) = nil error; want rejected", name, value)
		}
	}
}

func TestQuoteConfValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"on": "'on'", "it's": "'it''s'", `a\b`: `'a\\b'`} {
		if got := quoteConfValue(in); got != want {
			t.Errorf("quoteConfValue(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestDSNWithDatabase(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:p@127.0.0.1:5432/postgres?sslmode=disable": "postgres://u:p@127.0.0.1:5432/db1?sslmode=disable",
		"postgresql://u@h/x":                       "postgresql://u@h/db1",
		"host=127.0.0.1 port=5432 dbname=postgres": "host=127.0.0.1 port=5432 dbname=postgres dbname=db1",
	} {
		got, err := dsnWithDatabase(in, "db1")
		if err != nil || got != want {
			t.Errorf("dsnWithDatabase(%q) = %q, %v; want %q", in, got, err, want)
		}
		if cfg, err := pgx.ParseConfig(got); err != nil || cfg.Database != "db1" {
			t.Errorf("pgx reads %q as database %v (%v); want db1", got, cfg, err)
		}
	}
}

func TestCompareVersions(t *testing.T) {
	t.Parallel()
	if compareVersions("15", "9.6") <= 0 || compareVersions("9.6", "10") >= 0 || compareVersions("17", "17") != 0 {
		t.Error("compareVersions does not order major versions numerically")
	}
}
