package world

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

// A world is what an installation has: the store runs as the runtime role, which may write rows and nothing
// else, on the schema the owner role migrated; the client reaches the simulator with the token file's token.
func TestWorldRunsAsTheRuntimeRole(t *testing.T) {
	ctx := context.Background()
	w := New(t, Config{Sim: &juicesim.Config{Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 1, 2, 24*vram.GiB)}}})
	require.NoError(t, w.Store.CheckSchema(ctx))
	_, err := w.Pool.Exec(ctx, `CREATE TABLE juice_evil (x int)`)
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "want a permission error, got %v", err)
	require.Equal(t, "42501", pe.Code, "%v", err)
	var role string
	require.NoError(t, w.Pool.QueryRow(ctx, `SELECT current_user`).Scan(&role))
	require.NotEmpty(t, w.DB.Owner)
	require.NotContains(t, w.DB.Owner, "//"+role+"@", "the owner's URL is another role's")

	before := SimCalls(t, w.Sim.Sim, "GET /v1/status")
	_, err = w.Juice.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, before+1, SimCalls(t, w.Sim.Sim, "GET /v1/status"))
}
