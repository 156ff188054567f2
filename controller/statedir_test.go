package controller

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// writeFile writes a run's sealed session as the prolog does (its name, mode 0600).
func (h *harness) writeFile(dir string, run reconcile.RunID, id uuid.UUID) string {
	h.t.Helper()
	sealed, err := h.store.Sealed(context.Background(), id)
	require.NoError(h.t, err)
	require.NotEmpty(h.t, sealed)
	p := filepath.Join(dir, session.FileName(run.Binding()))
	require.NoError(h.t, os.WriteFile(p, sealed, 0o600))
	return p
}

// TestSessionFileGoesWithItsReadySession: when a ready reservation is let go (its job ended, was requeued, held
// or cancelled), the reconciler removes its run's session file from the state directory, so that no later job
// that reuses the id can be handed it; another run's file stays.
func TestSessionFileGoesWithItsReadySession(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	dir := t.TempDir()
	rc := h.reconciler(nil)
	rc.Files = &session.StateDir{Path: dir}
	run, keep := reconcile.RunID{Cluster: "c1", JobID: 70}, reconcile.RunID{Cluster: "c1", JobID: 71}
	r, k := h.ensure(run, gpus2), h.ensure(keep, gpus2)
	h.driveTo(rc, r.ID, reconcile.StateReady)
	h.driveTo(rc, k.ID, reconcile.StateReady)
	p, kp := h.writeFile(dir, run, r.ID), h.writeFile(dir, keep, k.ID)

	_, err := h.store.Unwant(ctx, r.ID, "job ended", true)
	require.NoError(t, err)
	h.driveTo(rc, r.ID, reconcile.StateReleased)
	require.NoFileExists(t, p, "the released run's file is removed")
	require.FileExists(t, kp, "the ready run's file stays")
}
