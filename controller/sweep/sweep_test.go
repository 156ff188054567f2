package sweep

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/juicefake"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

var _ Store = (*store.Store)(nil)

// memStore holds reservations in memory: what the sweep reads, without a database.
type memStore map[uuid.UUID]reconcile.Reservation

func (memStore) Cluster() string { return "c1" }

func (m memStore) Get(_ context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	r, ok := m[id]
	if !ok {
		return r, reconcile.ErrNotFound
	}
	return r, nil
}

func (m memStore) Holding(_ context.Context, sid string) (reconcile.Reservation, error) {
	for _, r := range m {
		if r.Status.SessionID == sid && !r.Status.State.Final() {
			return r, nil
		}
	}
	return reconcile.Reservation{}, reconcile.ErrNotFound
}

func (m memStore) LiveRun(_ context.Context, run reconcile.RunID) (reconcile.Reservation, error) {
	for _, r := range m {
		if r.Run == run && !r.Status.State.Final() {
			return r, nil
		}
	}
	return reconcile.Reservation{}, reconcile.ErrNotFound
}

// Only a session whose key names a reservation that let go of it (final, or holding another session) is
// cancelled, in every pool: a live run's session, an ended one, one whose key is not ours and one with no key are
// left alone; an orphan its agent has not taken yet is left for the next sweep.
func TestSessionsCancelsOnlyOrphansOfOurs(t *testing.T) {
	live, released, moved, assigned := uuid.New(), uuid.New(), uuid.New(), uuid.New()
	st := memStore{
		live:     {ID: live, Status: reconcile.Status{State: reconcile.StateReady, SessionID: "s1"}},
		released: {ID: released, Status: reconcile.Status{State: reconcile.StateReleased, SessionID: "s2"}},
		moved:    {ID: moved, Status: reconcile.Status{State: reconcile.StateReady, SessionID: "s4"}},
		assigned: {ID: assigned, Status: reconcile.Status{State: reconcile.StateFailed}},
	}
	juice := &juicefake.Juice{}
	juice.AddAgent("test", reconcile.Agent{ID: "a1", State: "active", Active: true})
	juice.AddAgent("lab", reconcile.Agent{ID: "a2", State: "active", Active: true})
	test, lab := request.Request{Pool: "test", GPUs: 1}, request.Request{Pool: "lab", GPUs: 1}
	for _, b := range []struct {
		key uuid.UUID
		req request.Request
	}{
		{live, test}, {released, test}, {moved, test}, {moved, test}, {released, test}, // s1..s5
		{uuid.New(), test}, {uuid.Nil, test}, {released, lab}, {assigned, test}, // s6..s9
	} {
		juice.Book(b.key, b.req)
	}
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5", "s6", "s7"} {
		juice.Activate(id, "a1", nil)
	}
	juice.End("s5")
	juice.Activate("s8", "a2", nil)
	juice.Place("s9", "a1")

	n, err := Sessions(context.Background(), st, juice, logr.Discard())
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.ElementsMatch(t, []string{"s2", "s3", "s8"}, juice.Calls().Cancelled)

	// The controller's own errors stop the sweep with the session named; one it no longer knows counts as gone.
	failing := juicefake.Intercept(juice, juicefake.Funcs{
		CancelSession: func(context.Context, reconcile.Juice, string) error { return errors.New("connection refused") },
	})
	juice.Activate("s9", "a1", nil)
	_, err = Sessions(context.Background(), st, failing, logr.Discard())
	require.ErrorContains(t, err, "cancel session s9: connection refused")
	juice.Forget("s9")
	walks := juice.Calls().Walks
	_, err = Sessions(context.Background(), st, juicefake.Intercept(juice, juicefake.Funcs{
		WalkPool: func(context.Context, reconcile.Juice, string, time.Time) (reconcile.PoolView, error) {
			return nil, errors.New("timeout")
		},
	}), logr.Discard())
	require.ErrorContains(t, err, "sweep: walk the agents: timeout")
	require.Equal(t, walks, juice.Calls().Walks)
}

var key = []byte("0123456789abcdef0123456789abcdef")

// sealFor seals a session file named name in dir for b, as this controller does, or as an older one did (v1: a
// header without the reservation).
func sealFor(t *testing.T, dir, name string, b session.Binding, v1 bool) string {
	t.Helper()
	var data []byte
	if v1 {
		hdr := fmt.Sprintf("JUICE-SESSION v1 cluster=%s job=%d run=%d", b.Cluster, b.JobID, b.Run)
		block, _ := aes.NewCipher(key)
		aead, _ := cipher.NewGCM(block)
		nonce := make([]byte, 12)
		data = aead.Seal(append([]byte(hdr+"\n"), nonce...), nonce, []byte("JUICE_A=1\n"), []byte(hdr))
	} else {
		var err error
		data, err = session.Seal(key, b, []session.EnvVar{{Name: "JUICE_A", Value: "1"}})
		require.NoError(t, err)
	}
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o600))
	return p
}

// The net under the reconciler and the epilog: a file stays only while the reservation it names is ready (or,
// naming none, while its run's is); another cluster's file and anything that is not a session file's name are
// left alone.
func TestSweepFilesRemovesWhatNoReadyReservationOwns(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	reserve := func(st memStore, job uint32, run int, state reconcile.State) reconcile.Reservation {
		r := reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: job, Run: run},
			Status: reconcile.Status{State: state}}
		st[r.ID] = r
		return r
	}
	file := func(r reconcile.Reservation) string {
		b := r.Run.Binding()
		b.Reservation = r.ID
		return sealFor(t, dir, session.FileName(b), b, false)
	}
	st := memStore{}
	rr, rl := reserve(st, 80, 0, reconcile.StateReady), reserve(st, 81, 0, reconcile.StateReleased)
	reserve(st, 80, 1, reconcile.StateReady)
	keepReady := file(rr)
	gone := []string{file(rl),
		// a reservation this cluster never had (a reused job id after the database was reset, say)
		sealFor(t, dir, "82.0.session", session.Binding{Cluster: "c1", JobID: 82, Reservation: uuid.New()}, false),
		// an older controller's file whose run has no reservation
		sealFor(t, dir, "83.0.session", session.Binding{Cluster: "c1", JobID: 83}, true),
		// a header for another run than the file's name
		sealFor(t, dir, "84.0.session", session.Binding{Cluster: "c1", JobID: 80, Reservation: rr.ID}, false),
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "85.0.session"), []byte("not a session"), 0o600))
	gone = append(gone, filepath.Join(dir, "85.0.session"))
	// an older controller's file of a run that is ready now: still its run's
	keepV1 := sealFor(t, dir, "80.1.session", session.Binding{Cluster: "c1", JobID: 80, Run: 1}, true)
	keepOther := sealFor(t, dir, "86.0.session", session.Binding{Cluster: "c2", JobID: 86, Reservation: uuid.New()}, false)
	keepTmp := filepath.Join(dir, ".81.0.session.tmp123")
	require.NoError(t, os.WriteFile(keepTmp, nil, 0o600))

	n, err := Files(ctx, st, &session.StateDir{Path: dir}, logr.Discard())
	require.NoError(t, err)
	require.Equal(t, len(gone), n)
	for _, p := range gone {
		require.NoFileExists(t, p)
	}
	for _, p := range []string{keepReady, keepV1, keepOther, keepTmp} {
		require.FileExists(t, p)
	}
	n, err = Files(ctx, st, &session.StateDir{Path: dir}, logr.Discard())
	require.NoError(t, err)
	require.Zero(t, n, "nothing more to remove")

	_, err = Files(ctx, st, &session.StateDir{Path: filepath.Join(dir, "missing")}, logr.Discard())
	require.Error(t, err, "a state directory that is not there is an error, never an empty sweep")
}
