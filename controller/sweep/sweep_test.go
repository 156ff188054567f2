package sweep

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
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

func (m memStore) LiveRun(_ context.Context, run reconcile.RunID) (reconcile.Reservation, error) {
	for _, r := range m {
		if r.Run == run && !r.Status.State.Final() {
			return r, nil
		}
	}
	return reconcile.Reservation{}, reconcile.ErrNotFound
}

// oneAgent is a Juice Controller with one active agent holding sessions; it records what is cancelled.
type oneAgent struct {
	juiceapi.Client
	sessions  []juiceapi.Session
	cancelled []string
}

func (o *oneAgent) ListAgents(context.Context, string) ([]juiceapi.Agent, error) {
	return []juiceapi.Agent{{ID: "a1", State: juiceapi.AgentActive}}, nil
}

func (o *oneAgent) GetAgent(context.Context, string) (*juiceapi.Agent, error) {
	return &juiceapi.Agent{ID: "a1", State: juiceapi.AgentActive, Sessions: o.sessions}, nil
}

func (o *oneAgent) CancelSession(_ context.Context, id string) error {
	o.cancelled = append(o.cancelled, id)
	return nil
}

// Only a session whose key names a reservation that let go of it (final, or holding another session) is
// cancelled: a live run's session, an ended one, and one whose key is not ours are left alone.
func TestSessionsCancelsOnlyOrphansOfOurs(t *testing.T) {
	live, released, moved := uuid.New(), uuid.New(), uuid.New()
	st := memStore{
		live:     {ID: live, Status: reconcile.Status{State: reconcile.StateReady, SessionID: "s-live"}},
		released: {ID: released, Status: reconcile.Status{State: reconcile.StateReleased, SessionID: "s-released"}},
		moved:    {ID: moved, Status: reconcile.Status{State: reconcile.StateReady, SessionID: "s-new"}},
	}
	juice := &oneAgent{sessions: []juiceapi.Session{
		{ID: "s-live", IdempotencyKey: live.String(), State: juiceapi.StateActive},
		{ID: "s-released", IdempotencyKey: released.String(), State: juiceapi.StateActive},
		{ID: "s-old", IdempotencyKey: moved.String(), State: juiceapi.StateActive},
		{ID: "s-new", IdempotencyKey: moved.String(), State: juiceapi.StateActive},
		{ID: "s-ended", IdempotencyKey: released.String(), State: juiceapi.StateClosed},
		{ID: "s-foreign", IdempotencyKey: uuid.NewString(), State: juiceapi.StateActive},
		{ID: "s-nokey", State: juiceapi.StateActive},
	}}
	n, err := Sessions(context.Background(), st, juice, logr.Discard())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.ElementsMatch(t, []string{"s-released", "s-old"}, juice.cancelled)
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
