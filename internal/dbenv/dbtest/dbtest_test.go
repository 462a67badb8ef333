package dbtest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { Main(m) }

func TestTestDatabaseName(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, tn := range []string{"TestX", "TestX", "TestÜber/sub test#01", strings.Repeat("TestLong", 20)} {
		name, err := testDatabaseName(tn)
		if err != nil {
			t.Fatalf("testDatabaseName(%q): %v", tn, err)
		}
		if seen[name] {
			t.Errorf("testDatabaseName(%q) repeated %q", tn, name)
		}
		seen[name] = true
	}
}

func TestRedactDSN(t *testing.T) {
	t.Parallel()
	if got := redactDSN("postgres://u:secret@h:1/db"); strings.Contains(got, "secret") {
		t.Errorf("redactDSN kept the password: %s", got)
	}
	if got := redactDSN("host=h password=secret"); strings.Contains(got, "secret") {
		t.Errorf("redactDSN kept the password: %s", got)
	}
}

// TestTestDatabaseIsolated checks that parallel tests get separate databases:
// each writes its own row into a table of the same name and sees only it.
func TestTestDatabaseIsolated(t *testing.T) {
	t.Parallel()
	const tests = 4
	dsns := make(chan string, tests)
	t.Run("group", func(t *testing.T) {
		for i := range tests {
			t.Run("db"+string(rune('a'+i)), func(t *testing.T) {
				t.Parallel()
				dsn := TestDatabase(t)
				dsns <- dsn
				ctx := context.Background()
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close(ctx)
				if _, err := conn.Exec(ctx, "CREATE TABLE marker (who text)"); err != nil {
					t.Fatal(err)
				}
				if _, err := conn.Exec(ctx, "INSERT INTO marker VALUES ($1)", t.Name()); err != nil {
					t.Fatal(err)
				}
				var n int
				var who string
				if err := conn.QueryRow(ctx, "SELECT count(*), min(who) FROM marker").Scan(&n, &who); err != nil {
					t.Fatal(err)
				}
				if n != 1 || who != t.Name() {
					t.Errorf("database shared: %d rows, first %q; want only %q", n, who, t.Name())
				}
			})
		}
	})
	close(dsns)
	// The group's cleanups have run: every database must be gone.
	pg := SharedPostgres(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	seen := map[string]bool{}
	for dsn := range dsns {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if seen[cfg.Database] {
			t.Errorf("database %s handed out twice", cfg.Database)
		}
		seen[cfg.Database] = true
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", cfg.Database).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if exists {
			t.Errorf("database %s still exists after its test's cleanup", cfg.Database)
		}
	}
	if len(seen) != tests {
		t.Errorf("%d databases; want %d", len(seen), tests)
	}
}

func TestMongoTestDatabaseName(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		name, err := MongoTestDatabaseName()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(name, mongoTestDatabasePrefix) || len(name) != len(mongoTestDatabasePrefix)+16 {
			t.Fatalf("name %q: want %s + 16 hex digits", name, mongoTestDatabasePrefix)
		}
		// MongoDB's rules: under 64 bytes, none of /\. "$*<>:|? or NUL.
		if len(name) >= 64 || strings.ContainsAny(name, "/\\. \"$*<>:|?\x00") {
			t.Fatalf("name %q is not a valid MongoDB database name", name)
		}
		if seen[name] {
			t.Fatalf("name %q returned twice", name)
		}
		seen[name] = true
	}
}

func TestTestMongoURIFromEnvironment(t *testing.T) {
	const uri = "mongodb://127.0.0.1:1/?replicaSet=rs0"
	t.Setenv(EnvMongoURI, uri)
	if got := TestMongoURI(t); got != uri {
		t.Fatalf("TestMongoURI = %q, want %q", got, uri)
	}
}
