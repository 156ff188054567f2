package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// TestKeyRotation: rotate keeps the old key as the previous one and installs a new one, atomically and 0600;
// a file sealed before the rotation still opens with the keys on disk, one sealed after opens under the new
// key; a second rotate is refused while a previous key is installed; retire drops it, and the old file no
// longer opens.
func TestKeyRotation(t *testing.T) {
	dir := t.TempDir()
	kf := filepath.Join(dir, "cluster.key")
	require.NoError(t, os.WriteFile(kf, []byte(strings.Repeat("1f", 32)+"\n"), 0o600))
	key := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runKey(context.Background(), &out, append(args, "--config=", "--cluster-key", kf))
		return out.String(), err
	}
	old, err := session.KeyFile(kf).Bytes()
	require.NoError(t, err)
	id := session.Binding{Cluster: "c", JobID: 5, Run: 0, Reservation: uuid.New()}
	sealedOld, err := session.Seal(old, id, []session.EnvVar{{Name: "JUICE_A", Value: "old"}})
	require.NoError(t, err)

	out, err := key("show")
	require.NoError(t, err)
	require.Contains(t, out, "current   "+session.KeyID(old))
	require.Contains(t, out, "previous  none")

	out, err = key("rotate")
	require.NoError(t, err)
	keys, err := session.KeyFile(kf).All()
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, old, keys[1], "the old key is the previous one")
	require.NotEqual(t, old, keys[0])
	require.Contains(t, out, "current "+session.KeyID(keys[0])+", previous "+session.KeyID(old))
	for _, p := range []string{kf, kf + session.PreviousSuffix} {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), p)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	require.Empty(t, leftovers, "no temporary file is left behind")
	_, err = session.Open(sealedOld, id, keys...)
	require.NoError(t, err, "a file sealed before the rotation still opens")
	sealedNew, err := session.Seal(keys[0], id, []session.EnvVar{{Name: "JUICE_A", Value: "new"}})
	require.NoError(t, err)
	_, err = session.Open(sealedNew, id, keys...)
	require.NoError(t, err)

	_, err = key("rotate")
	require.ErrorContains(t, err, "retire it first")
	again, err := session.KeyFile(kf).All()
	require.NoError(t, err)
	require.Equal(t, keys, again, "a refused rotate changes nothing")

	out, err = key("retire")
	require.NoError(t, err)
	require.Contains(t, out, session.KeyID(old))
	keys, err = session.KeyFile(kf).All()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	_, err = session.Open(sealedOld, id, keys...)
	require.ErrorContains(t, err, "not a known key", "after retire the old file no longer opens")
	_, err = key("retire")
	require.Equal(t, exitNotFound, exitStatusOf(err))

	// --from: the new key is one already installed elsewhere (the compute nodes); it must be a secret file.
	from := filepath.Join(dir, "next.key")
	require.NoError(t, os.WriteFile(from, []byte(strings.Repeat("ab", 32)), 0o644))
	_, err = key("rotate", "--from", from)
	require.ErrorContains(t, err, "chmod 600")
	require.NoError(t, os.Chmod(from, 0o600))
	_, err = key("rotate", "--from", from)
	require.NoError(t, err)
	cur, err := session.KeyFile(kf).Bytes()
	require.NoError(t, err)
	require.Equal(t, bytes.Repeat([]byte{0xab}, 32), cur)
	_, err = key("retire")
	require.NoError(t, err)
	_, err = key("rotate", "--from", kf)
	require.ErrorContains(t, err, "is the current key")

	require.Equal(t, exitUsage, exitStatusOf(run(context.Background(), []string{"key"})))
	require.Equal(t, exitUsage, exitStatusOf(run(context.Background(), []string{"key", "spin", "--config="})))
	_, err = key("show", "--from", from)
	require.Equal(t, exitUsage, exitStatusOf(err))
}

// A previous key that group or others may read is refused by every command that reads it.
func TestKeyRefusesOpenPreviousKey(t *testing.T) {
	dir := t.TempDir()
	kf := filepath.Join(dir, "cluster.key")
	require.NoError(t, os.WriteFile(kf, []byte(strings.Repeat("1f", 32)), 0o600))
	require.NoError(t, os.WriteFile(kf+session.PreviousSuffix, []byte(strings.Repeat("2e", 32)), 0o640))
	for _, sub := range []string{"show", "rotate", "retire"} {
		err := runKey(context.Background(), &bytes.Buffer{}, []string{sub, "--config=", "--cluster-key", kf})
		require.ErrorContains(t, err, "chmod 600", sub)
	}
}

// TestKeyRetireWaitsForReadySessions: with the database, retire refuses while a ready reservation holds a session
// sealed under the previous key (its job opens the file at every step), names the run, and retires once that
// reservation has let go, or at once with --force. Without the database (a compute node) it says it did not check.
func TestKeyRetireWaitsForReadySessions(t *testing.T) {
	url, _, st := migratedStore(t)
	ctx := context.Background()

	dir := t.TempDir()
	kf := filepath.Join(dir, "cluster.key")
	require.NoError(t, os.WriteFile(kf, []byte(strings.Repeat("1f", 32)+"\n"), 0o600))
	old, err := session.KeyFile(kf).Bytes()
	require.NoError(t, err)
	key := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := runKey(ctx, &out, append(args, "--config=", "--cluster-key", kf, "--database-url", url, "--cluster", "c1"))
		return out.String(), err
	}
	// Job 7 is ready with its session sealed under the key that is about to become the previous one.
	r, _, err := st.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c1", JobID: 7}, Request: request.Request{Pool: "demo", GPUs: 1},
		UserName: "alice", JobState: "PENDING", Reason: "test"})
	require.NoError(t, err)
	for _, ev := range []reconcile.Event{reconcile.EventRequest, reconcile.EventQueued, reconcile.EventActive} {
		tr, err := reconcile.Apply(&r, ev, "test", time.Now())
		require.NoError(t, err)
		switch ev {
		case reconcile.EventQueued:
			r.Status.SessionID = "sess-7"
		case reconcile.EventActive:
			b := r.Run.Binding()
			b.Reservation = r.ID
			r.Status.Sealed, err = session.Seal(old, b, []session.EnvVar{{Name: "JUICE_A", Value: "1"}})
			require.NoError(t, err)
		}
		require.NoError(t, st.SaveStatus(ctx, &r, tr))
	}
	_, err = key("rotate")
	require.NoError(t, err)

	_, err = key("retire")
	require.ErrorContains(t, err, "1 ready reservation(s) hold sessions sealed under the previous key "+session.KeyID(old)+" (job.run 7.0)")
	_, err = os.Stat(kf + session.PreviousSuffix)
	require.NoError(t, err, "a refused retire keeps the previous key")

	_, err = st.Unwant(ctx, r.ID, "job ended", true)
	require.NoError(t, err)
	r, err = st.Get(ctx, r.ID)
	require.NoError(t, err)
	tr, err := reconcile.Apply(&r, reconcile.EventUnwanted, "job ended", time.Now())
	require.NoError(t, err)
	require.NoError(t, st.SaveStatus(ctx, &r, tr))
	out, err := key("retire")
	require.NoError(t, err, "no ready reservation holds the previous key's sessions any more")
	require.Contains(t, out, "retired the previous key "+session.KeyID(old))

	// --force, and no database.
	_, err = key("rotate")
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, runKey(ctx, &buf, []string{"retire", "--config=", "--cluster-key", kf}))
	require.Contains(t, buf.String(), "not checked")
	require.Equal(t, exitUsage, exitStatusOf(runKey(ctx, &buf, []string{"rotate", "--force", "--config=", "--cluster-key", kf})))
}
