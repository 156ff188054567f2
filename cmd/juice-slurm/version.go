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

func versionFlags(fs *flag.FlagSet) *string {
	return fs.String("database-url", "", "also print the schema version of this database (default: none)")
}

// runVersion prints the binary's version and the newest schema it knows; with a database URL (a flag,
// JUICE_DATABASE_URL or the settings file), also the database's schema version, and fails when it cannot say.
func runVersion(ctx context.Context, out io.Writer, args []string) error {
	fs := flag.NewFlagSet("juice-slurm version", flag.ContinueOnError)
	dbURL := versionFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(out, "juice-slurm %s (%s)\n", Version, runtime.Version())
	fmt.Fprintf(out, "schema: %d (the newest this binary knows)\n", store.KnownSchema())
	if *dbURL == "" {
		return nil
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	v, err := store.New(pool, "").SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	note := ""
	switch known := store.KnownSchema(); {
	case v < known:
		note = " (older: run juice-slurm migrate)"
	case v > known:
		note = " (newer than this binary: upgrade it)"
	}
	fmt.Fprintf(out, "database schema: %d%s\n", v, note)
	return nil
}
