package admincli

import (
	"context"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/berkcansavur/relaybus/relaybus"
	"github.com/berkcansavur/relaybus/relaybus/postgres"
)

func schemaCommand() *command {
	var f connFlags
	cmd := &command{
		usage: fmt.Sprintf(`usage: relaybus schema [flags]

Prints the SQL that Bus.Setup runs (the PostgreSQL store's SchemaSQL, schema
version %d) for --schema and --table-prefix, as one script, for a migration
tool: apply it in one transaction. It installs the schema, or upgrades a
0.1.x one in place (stop every 0.1.x worker first: see UPGRADING.md), and
refuses a schema it does not know. It is idempotent. It needs no database.`, postgres.SchemaVersion),
	}
	cmd.flags = func(fs *flag.FlagSet) {
		fs.StringVar(&f.schema, "schema", postgres.DefaultSchema, "the PostgreSQL schema of the relaybus tables (the store's Options.Schema)")
		fs.StringVar(&f.prefix, "table-prefix", postgres.DefaultTablePrefix, "the prefix of the relaybus tables (the store's Options.TablePrefix)")
		fs.BoolVar(&f.json, "json", false, `write {"schema_version": N, "sql": "..."} on stdout`)
	}
	cmd.run = func(_ context.Context, c *call) error {
		sql, err := schemaSQL(&f)
		if err != nil {
			return usagef("relaybus %s: %v", c.name, err)
		}
		if f.json {
			return writeJSON(c.stdout(), struct {
				SchemaVersion int    `json:"schema_version"`
				SQL           string `json:"sql"`
			}{postgres.SchemaVersion, sql})
		}
		_, err = fmt.Fprint(c.stdout(), sql)
		return err
	}
	return cmd
}

// schemaSQL is the store's SchemaSQL for the schema and prefix of f. The
// store needs a pool, which is never connected: pgxpool connects on
// first use.
func schemaSQL(f *connFlags) (string, error) {
	cfg, err := pgxpool.ParseConfig("host=localhost")
	if err != nil {
		return "", err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return "", err
	}
	defer pool.Close()
	store, err := postgres.New(pool, &postgres.Options{Schema: f.schema, TablePrefix: f.prefix})
	if err != nil {
		return "", err
	}
	return store.SchemaSQL(), nil
}

func versionCommand() *command {
	var asJSON bool
	return &command{
		usage: "usage: relaybus version [flags]\n\nPrints the version of relaybus this command was built from.",
		flags: func(fs *flag.FlagSet) { fs.BoolVar(&asJSON, "json", false, `write {"version": "..."} on stdout`) },
		run: func(_ context.Context, c *call) error {
			if asJSON {
				return writeJSON(c.stdout(), struct {
					Version string `json:"version"`
				}{relaybus.Version})
			}
			_, err := fmt.Fprintf(c.stdout(), "relaybus %s\n", relaybus.Version)
			return err
		},
	}
}
