package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

func versionFlags(fs *flag.FlagSet) (dbURL *string, asJSON *bool) {
	return fs.String("database-url", "", "also print the schema version of this database (default: none)"),
		fs.Bool("json", false, "print JSON instead of text")
}

// versionOut is version's JSON: a contract for scripts.
type versionOut struct {
	Version     string `json:"version"`
	Go          string `json:"go"`
	KnownSchema int    `json:"schema"`
	// DatabaseSchema is the database's schema version, when a database URL was given.
	DatabaseSchema *int `json:"database_schema,omitempty"`
}

// runVersion prints the binary's version and the newest schema it knows; with a database URL (a flag,
// JUICE_DATABASE_URL or the settings file), also the database's schema version, and fails when it cannot say.
// A user who may not read the settings file gets the binary's version (parseUserFlags).
func runVersion(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("juice-slurm version", flag.ContinueOnError)
	dbURL, asJSON := versionFlags(fs)
	if _, err := parseUserFlags(fs, args); err != nil {
		return err
	}
	v := versionOut{Version: Version, Go: runtime.Version(), KnownSchema: store.KnownSchema()}
	if *dbURL != "" {
		pool, err := pgxpool.New(ctx, *dbURL)
		if err != nil {
			return fmt.Errorf("database: %w", err)
		}
		defer pool.Close()
		n, err := store.New(pool, "").SchemaVersion(ctx)
		if err != nil {
			return fmt.Errorf("database: %w", err)
		}
		v.DatabaseSchema = &n
	}
	if *asJSON {
		return writeJSON(out, v)
	}
	fmt.Fprintf(out, "juice-slurm %s (%s)\n", v.Version, v.Go)
	fmt.Fprintf(out, "schema: %d (the newest this binary knows)\n", v.KnownSchema)
	if v.DatabaseSchema == nil {
		return nil
	}
	note := ""
	switch n := *v.DatabaseSchema; {
	case n < v.KnownSchema:
		note = " (older: run juice-slurm migrate)"
	case n > v.KnownSchema:
		note = " (newer than this binary: upgrade it)"
	}
	fmt.Fprintf(out, "database schema: %d%s\n", *v.DatabaseSchema, note)
	return nil
}
