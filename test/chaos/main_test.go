package main

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Sessions of one run are counted together only when their reservations overlapped: a reservation released before
// the run's next one was made (a held job's, or one that yielded its pool) is not a doubled session; two sessions
// under one key are.
func TestAtOnce(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	res := func(created, ended time.Time, state reconcile.State) reconcile.Reservation {
		return reconcile.Reservation{ID: uuid.New(), CreatedAt: created, Status: reconcile.Status{State: state, UpdatedAt: ended}}
	}
	sessions := map[string][]juiceapi.Session{}
	with := func(r reconcile.Reservation, n int) reconcile.Reservation {
		for i := 0; i < n; i++ {
			sessions[r.ID.String()] = append(sessions[r.ID.String()], juiceapi.Session{ID: uuid.NewString()})
		}
		return r
	}
	yielded := with(res(t0, t0.Add(time.Second), reconcile.StateReleased), 1)
	next := with(res(t0.Add(2*time.Second), t0.Add(9*time.Second), reconcile.StateReleased), 1)
	require.Equal(t, 1, atOnce([]reconcile.Reservation{yielded, next}, sessions), "one after the other")

	overlapping := with(res(t0.Add(500*time.Millisecond), t0.Add(3*time.Second), reconcile.StateReleased), 1)
	require.Equal(t, 2, atOnce([]reconcile.Reservation{yielded, overlapping}, sessions), "made before the other was released")

	live := with(res(t0.Add(10*time.Second), t0.Add(10*time.Second), reconcile.StateReady), 1)
	open := with(res(t0.Add(11*time.Second), t0.Add(11*time.Second), reconcile.StateWaiting), 1)
	require.Equal(t, 2, atOnce([]reconcile.Reservation{live, open}, sessions), "two open reservations")

	doubled := with(res(t0, t0.Add(time.Second), reconcile.StateReleased), 2)
	require.Equal(t, 2, atOnce([]reconcile.Reservation{doubled}, sessions), "two under one key")

	// A run that took a like run's session (hand-off) while its own waited in the queue, cancelled there: one
	// session; had an agent been given its own before the cancel, two.
	taker := res(t0, t0.Add(time.Second), reconcile.StateReleased)
	taker.Status.SessionID = "handed"
	sessions[taker.ID.String()] = []juiceapi.Session{{ID: "own", State: juiceapi.StateClosed}}
	require.Equal(t, 1, atOnce([]reconcile.Reservation{taker}, sessions), "its own never held a GPU")
	sessions[taker.ID.String()][0].Address = "agent:1"
	require.Equal(t, 2, atOnce([]reconcile.Reservation{taker}, sessions), "its own held a GPU")
}
