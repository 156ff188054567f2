package store

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// F9: the controller's role reads and writes rows and nothing else: no DDL, no superuser, no way to run a program
// as postgres. Everything it does at run time works with these rights (every controller test runs as it).
func TestRuntimeRoleHasNoDDL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	owner, s := newStores(t, "c")
	_, _, err := s.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c", JobID: 1}, Request: request.Request{Pool: "p", GPUs: 1}})
	require.NoError(t, err, "the runtime role writes rows")
	denied := func(what, sql string) {
		t.Helper()
		_, err := s.Pool().Exec(ctx, sql)
		var pe *pgconn.PgError
		require.True(t, errors.As(err, &pe), "%s: want a permission error, got %v", what, err)
		require.Equal(t, "42501", pe.Code, "%s: %v", what, err)
	}
	denied("create a table", `CREATE TABLE juice_evil (x int)`)
	denied("drop a table", `DROP TABLE juice_events`)
	denied("alter a table", `ALTER TABLE juice_reservations ADD COLUMN evil int`)
	denied("truncate", `TRUNCATE juice_events`)
	denied("run a program", `COPY juice_leases TO PROGRAM 'id'`)
	denied("create a role", `CREATE ROLE evil LOGIN SUPERUSER`)
	var super, createdb bool
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT rolsuper, rolcreatedb FROM pg_roles WHERE rolname = current_user`).Scan(&super, &createdb))
	require.False(t, super || createdb, "the runtime role is neither superuser nor creates databases")
	require.NoError(t, owner.Pool().QueryRow(ctx, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`).Scan(&super))
	require.False(t, super, "the owner role is no superuser either")
	require.Error(t, s.Migrate(ctx), "the runtime role cannot migrate")
}

// The controller refuses a schema newer than it knows, and one older than it needs; migrate refuses to touch a
// newer one.
func TestSchemaVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh := New(newPool(t, testbed.NewDatabase(t)), "c")
	v, err := fresh.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, v, "a database never migrated")
	require.ErrorIs(t, fresh.CheckSchema(ctx), ErrSchemaOlder)

	owner, s := newStores(t, "c")
	v, err = s.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, KnownSchema(), v)
	require.GreaterOrEqual(t, v, 3)
	require.NoError(t, s.CheckSchema(ctx))

	// A newer juice-slurm migrated the database.
	_, err = owner.Pool().Exec(ctx, `INSERT INTO juice_schema_migrations (version) VALUES ($1)`, KnownSchema()+1)
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, ErrSchemaNewer)
	require.Contains(t, err.Error(), "upgrade juice-slurm")
	require.ErrorIs(t, owner.Migrate(ctx), ErrSchemaNewer)
}
