package controller

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/sweep"
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

// sealFor seals a file for any binding under the harness key, as an older or another controller might have.
func (h *harness) sealFor(dir string, name string, b session.Binding, v1 bool) string {
	h.t.Helper()
	var data []byte
	if v1 {
		hdr := "JUICE-SESSION v1 cluster=" + b.Cluster + " job=" + itoa(b.JobID) + " run=" + itoa(uint32(b.Run))
		block, _ := aes.NewCipher(h.key)
		aead, _ := cipher.NewGCM(block)
		nonce := make([]byte, 12)
		data = aead.Seal(append([]byte(hdr+"\n"), nonce...), nonce, []byte("JUICE_A=1\n"), []byte(hdr))
	} else {
		var err error
		data, err = session.Seal(h.key, b, []session.EnvVar{{Name: "JUICE_A", Value: "1"}})
		require.NoError(h.t, err)
	}
	p := filepath.Join(dir, name)
	require.NoError(h.t, os.WriteFile(p, data, 0o600))
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

// TestSweepFilesRemovesWhatNoReadyReservationOwns: the net under the reconciler and the epilog. A file stays only
// while the reservation it names is ready (or, naming none, while its run's is); another cluster's file and
// anything that is not a session file's name are left alone.
func TestSweepFilesRemovesWhatNoReadyReservationOwns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	dir := t.TempDir()
	rc := h.reconciler(nil) // no Files: the files stay behind, as when the leader ran elsewhere
	ready, released := reconcile.RunID{Cluster: "c1", JobID: 80}, reconcile.RunID{Cluster: "c1", JobID: 81}
	rr, rl := h.ensure(ready, gpus2), h.ensure(released, gpus2)
	h.driveTo(rc, rr.ID, reconcile.StateReady)
	h.driveTo(rc, rl.ID, reconcile.StateReady)
	keepReady := h.writeFile(dir, ready, rr.ID)
	gone := []string{h.writeFile(dir, released, rl.ID)}
	_, err := h.store.Unwant(ctx, rl.ID, "job ended", true)
	require.NoError(t, err)
	h.driveTo(rc, rl.ID, reconcile.StateReleased)

	gone = append(gone,
		// a reservation this cluster never had (a reused job id after the database was reset, say)
		h.sealFor(dir, "82.0.session", session.Binding{Cluster: "c1", JobID: 82, Reservation: uuid.New()}, false),
		// an older controller's file whose run has no reservation
		h.sealFor(dir, "83.0.session", session.Binding{Cluster: "c1", JobID: 83}, true),
		// a header for another run than the file's name
		h.sealFor(dir, "84.0.session", session.Binding{Cluster: "c1", JobID: 80, Reservation: rr.ID}, false),
	)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "85.0.session"), []byte("not a session"), 0o600))
	gone = append(gone, filepath.Join(dir, "85.0.session"))
	// an older controller's file of a run that is ready now: still its run's
	keepV1 := h.sealFor(dir, "80.1.session", session.Binding{Cluster: "c1", JobID: 80, Run: 1}, true)
	v1run := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 80, Run: 1}, gpus2)
	h.driveTo(rc, v1run.ID, reconcile.StateReady)
	keepOther := h.sealFor(dir, "86.0.session", session.Binding{Cluster: "c2", JobID: 86, Reservation: uuid.New()}, false)
	keepTmp := filepath.Join(dir, ".81.0.session.tmp123")
	require.NoError(t, os.WriteFile(keepTmp, nil, 0o600))

	n, err := sweep.Files(ctx, h.store, &session.StateDir{Path: dir}, h.log)
	require.NoError(t, err)
	require.Equal(t, len(gone), n)
	for _, p := range gone {
		require.NoFileExists(t, p)
	}
	for _, p := range []string{keepReady, keepV1, keepOther, keepTmp} {
		require.FileExists(t, p)
	}
	n, err = sweep.Files(ctx, h.store, &session.StateDir{Path: dir}, h.log)
	require.NoError(t, err)
	require.Zero(t, n, "nothing more to remove")

	_, err = sweep.Files(ctx, h.store, &session.StateDir{Path: filepath.Join(dir, "missing")}, h.log)
	require.Error(t, err, "a state directory that is not there is an error, never an empty sweep")
}
