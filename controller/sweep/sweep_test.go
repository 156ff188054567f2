package sweep

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
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
