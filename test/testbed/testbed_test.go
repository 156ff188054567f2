package testbed

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestTestDBCreatedReadsTheName(t *testing.T) {
	at, ok := testDBCreated("juice_test_1764800000_0a1b2c3d4e5f")
	require.True(t, ok)
	require.Equal(t, time.Unix(1764800000, 0), at)
	for _, name := range []string{"juice_test_0a1b2c3d4e5f", "juice", "juice_test_x_1", "juice_test__1", "other_1764800000_a"} {
		_, ok := testDBCreated(name)
		require.False(t, ok, name)
	}
}

// A test database whose drop never ran (its run was killed) is dropped by a later CreateDatabase once it is older
// than staleAfter; a younger one, and one named as older versions named them, are left alone.
func TestCreateDatabaseDropsStaleOnes(t *testing.T) {
	env := Require(t)
	if env.PostgresURL() == "" {
		Unavailable(t, "JUICE_TESTBED_PG_URL is not in %s", EnvFile())
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, env.PostgresURL())
	require.NoError(t, err)
	// Closed after the drops below (cleanups run last first), not by a defer, which would run before them.
	t.Cleanup(func() { conn.Close(context.Background()) })
	now := time.Now()
	stale := fmt.Sprintf("%s%d_%s", testDBPrefix, now.Add(-staleAfter-time.Hour).Unix(), randomSuffix())
	young := fmt.Sprintf("%s%d_%s", testDBPrefix, now.Add(-staleAfter+time.Hour).Unix(), randomSuffix())
	for _, name := range []string{stale, young} {
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, name := range []string{stale, young} {
			_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())
		}
	})
	exists := func(name string) bool {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
		return n == 1
	}

	_, drop, err := CreateDatabase(ctx, env)
	require.NoError(t, err)
	require.NoError(t, drop())
	require.False(t, exists(stale), "the stale database is dropped")
	require.True(t, exists(young), "a younger one is left")
}
