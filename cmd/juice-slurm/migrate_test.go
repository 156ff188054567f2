package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// juice-slurm migrate applies the schema as the owner role and grants the runtime role; the controller, as the
// runtime role, starts on that schema, waits on an older one and refuses a newer one at once.
func TestMigrateAndTheControllersSchemaCheck(t *testing.T) {
	ctx := context.Background()
	env := testbed.Require(t)
	owner := testbed.NewDatabase(t)
	runtime := testbed.RuntimeURL(t, owner)
	dir := t.TempDir()
	files := map[string]string{"key": strings.Repeat("ab", 32), "secret": "a-hook-secret-of-some-length", "token": "m2m_x"}
	for name, v := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600))
	}
	controller := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return run(ctx, []string{"controller", "--config=", "--cluster", "c", "--database-url", runtime, "--juice-token-file",
			filepath.Join(dir, "token"), "--slurm-token-file", filepath.Join(dir, "token"), "--cluster-key", filepath.Join(dir, "key"), "--hook-secret", filepath.Join(dir, "secret"),
			"--hook-listen", "127.0.0.1:0", "--hook-cert=", "--policy", filepath.Join(dir, "no-policy"), "--slurmrestd-url", "http://127.0.0.1:1",
			"--juice-url", "http://127.0.0.1:1"})
	}

	// Not migrated: the controller waits (it never migrates), saying why.
	err := controller(2 * time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "juice-slurm migrate")
	require.Error(t, run(ctx, []string{"migrate", "--config=", "--database-url", runtime}), "the runtime role cannot migrate")
	require.Error(t, run(ctx, []string{"migrate", "--config=", "--check", "--database-url", owner}))

	require.NoError(t, run(ctx, []string{"migrate", "--config=", "--database-url", owner, "--runtime-role", env.RuntimeRole()}))
	require.NoError(t, run(ctx, []string{"migrate", "--config=", "--database-url", owner, "--runtime-role", env.RuntimeRole()}), "again: nothing to do")
	require.NoError(t, run(ctx, []string{"migrate", "--config=", "--check", "--database-url", runtime}))

	// A newer juice-slurm migrated it: refused at once, not waited on.
	pool, err := pgxpool.New(ctx, owner)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO juice_schema_migrations (version) VALUES ($1)`, store.KnownSchema()+1)
	require.NoError(t, err)
	start := time.Now()
	err = controller(20 * time.Second)
	require.ErrorIs(t, err, store.ErrSchemaNewer)
	require.Less(t, time.Since(start), 10*time.Second, "refused at once")
	require.ErrorIs(t, run(ctx, []string{"migrate", "--config=", "--database-url", owner}), store.ErrSchemaNewer)
}
