package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// migrateFlags are migrate's settings. Its database-url is the owner role's: give it on the command line (the
// settings file's is the runtime role's, which may not migrate).
func migrateFlags(fs *flag.FlagSet) (dbURL, runtimeRole *string, check *bool) {
	return fs.String("database-url", "", "PostgreSQL URL of the owner role, e.g. postgres://juice_owner@db/juice (required)"),
		fs.String("runtime-role", "", "the role the controller runs as: granted SELECT, INSERT, UPDATE, DELETE on the tables"),
		fs.Bool("check", false, "only say whether the database is at the version this binary needs (exit 1 when not)")
}

// runMigrate applies the schema's migrations as the owner role and grants the runtime role (the controller's)
// what it needs on the tables: rows, never DDL. The controller never migrates: it refuses a schema older than it
// needs or newer than it knows, so the upgrade order is: stop the controllers (or not: they keep running on the
// old schema until restarted), `juice-slurm migrate`, then start the new binary.
func runMigrate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("juice-slurm migrate", flag.ContinueOnError)
	dbURL, runtimeRole, check := migrateFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dbURL == "" {
		return usageError{fmt.Errorf("migrate: --database-url is required (the owner role's; or JUICE_DATABASE_URL)")}
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	st := store.New(pool, "")
	before, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if *check {
		if err := st.CheckSchema(ctx); err != nil {
			return err
		}
		fmt.Printf("schema at version %d, the one this binary needs\n", before)
		return nil
	}
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	if *runtimeRole != "" {
		if err := st.GrantRuntime(ctx, *runtimeRole); err != nil {
			return err
		}
	}
	after, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if after == before {
		fmt.Printf("schema at version %d: nothing to do\n", after)
	} else {
		fmt.Printf("schema migrated from version %d to %d\n", before, after)
	}
	if *runtimeRole != "" {
		fmt.Printf("role %s may read and write the tables\n", *runtimeRole)
	}
	return nil
}
