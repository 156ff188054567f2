package jobactor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

var (
	_ Store = (*store.Store)(nil)
	_ Slurm = (*slurmrest.Client)(nil)
)

// memStore holds reservations in memory: what the actor reads, without a database.
type memStore map[uuid.UUID]reconcile.Reservation

func (m memStore) Get(_ context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	r, ok := m[id]
	if !ok {
		return r, reconcile.ErrNotFound
	}
	return r, nil
}

// The job actor hears of the reconciler's moves it may act on, and of those only: two of the three moves of a
// run served (requesting, waiting) cost it no pass, unless it told the run's job to wait.
func TestActorHearsOnlyTheMovesItActsOn(t *testing.T) {
	a := &Actor{}
	id, told := uuid.New(), uuid.New()
	a.told = map[uuid.UUID]string{told: "juice: waiting"}
	for state, want := range map[reconcile.State]bool{
		reconcile.StatePending: true, reconcile.StateReady: true, reconcile.StateFailed: true,
		reconcile.StateRequesting: false, reconcile.StateWaiting: false, reconcile.StateReleasing: false, reconcile.StateReleased: false,
	} {
		require.Equal(t, want, a.Moves(id, state), "move to %s", state)
		require.True(t, a.Moves(told, state), "move to %s of a run told to wait", state)
	}
}

var errSlurmDown = errors.New("slurmrestd: connection refused")

// The job actor's update fails: the pass fails (the queue retries it with backoff); once slurmrestd takes it, the
// requeued run is let begin.
func TestActorRetriesAFailedUpdate(t *testing.T) {
	ctx := context.Background()
	slurm := fakeslurm.New()
	j := fakeslurm.JuiceJob(4, 1, slurmrest.StatePending, "juice:v1:pool=test,gpus=1")
	j.StateReason = "BeginTime"
	slurm.Set(j)
	// A requeued run whose session is ready while its job waits out the requeue delay.
	id := uuid.New()
	st := memStore{id: {ID: id, Run: reconcile.RunID{Cluster: "c1", JobID: 4, Run: 1}, Request: request.Request{Pool: "test", GPUs: 1},
		Spec:   reconcile.Spec{Wanted: true, JobState: "PENDING", JobReason: "BeginTime"},
		Status: reconcile.Status{State: reconcile.StateReady, SessionID: "s1", ReadyAt: time.Now()}}}
	a := &Actor{Store: st, Slurm: slurm, Log: logr.Discard()}
	slurm.Intercept(fakeslurm.Funcs{UpdateJob: func(context.Context, uint32, slurmrest.JobUpdate, func(context.Context, uint32, slurmrest.JobUpdate) error) error {
		return errSlurmDown
	}})
	require.ErrorIs(t, a.Act(ctx, id), errSlurmDown)
	require.Zero(t, beganNow(slurm))
	slurm.Intercept(fakeslurm.Funcs{})
	require.NoError(t, a.Act(ctx, id))
	require.Equal(t, 1, beganNow(slurm))
	job, err := slurm.GetJob(ctx, 4)
	require.NoError(t, err)
	require.Equal(t, "None", job.StateReason)
}

func beganNow(s *fakeslurm.Slurm) int {
	n := 0
	for _, u := range s.Updates() {
		if u.BeginNow {
			n++
		}
	}
	return n
}

// ender records the actor's requests.
type ender struct{ calls []string }

func (e *ender) Requeue(_ context.Context, job uint32) error {
	e.calls = append(e.calls, "requeue")
	return nil
}
func (e *ender) Cancel(_ context.Context, job uint32) error {
	e.calls = append(e.calls, "cancel")
	return nil
}
func (e *ender) Notify(_ context.Context, job uint32, msg string) error {
	e.calls = append(e.calls, "notify "+msg)
	return nil
}

// A stranded run's batch job is requeued, its user told why, only while Slurm shows that very run RUNNING: not a
// job back in its prolog (Slurm ran it again), nor one of a later run, nor an ended one.
func TestEndStrandedRequeuesOnlyTheRunningRun(t *testing.T) {
	ctx := context.Background()
	id := uuid.New()
	st := memStore{id: {ID: id, Run: reconcile.RunID{Cluster: "c1", JobID: 9}, Request: request.Request{Pool: "test", GPUs: 1},
		Spec:   reconcile.Spec{Wanted: true, JobState: "RUNNING"},
		Status: reconcile.Status{State: reconcile.StateReady, SessionID: "s1", ReadyAt: time.Now()}}}
	for name, tc := range map[string]struct {
		state slurmrest.JobState
		run   int
		want  []string
	}{
		"running":       {slurmrest.StateRunning, 0, []string{"notify", "requeue"}},
		"in its prolog": {slurmrest.StateConfiguring, 0, nil},
		"a later run":   {slurmrest.StateRunning, 1, nil},
		"ended":         {slurmrest.StateCompleted, 0, nil},
	} {
		slurm := fakeslurm.New()
		j := fakeslurm.JuiceJob(9, tc.run, tc.state, "juice:v1:pool=test,gpus=1")
		slurm.Set(j)
		e := &ender{}
		a := &Actor{Store: st, Slurm: slurm, Log: logr.Discard(), Ender: e}
		require.NoError(t, a.EndStranded(ctx, id), name)
		var got []string
		for _, c := range e.calls {
			if len(c) > 7 && c[:7] == "notify " {
				require.Contains(t, c, "never wrote its session file", name)
				c = "notify"
			}
			got = append(got, c)
		}
		require.Equal(t, tc.want, got, name)
	}
	require.NoError(t, (&Actor{Store: memStore{}, Log: logr.Discard()}).EndStranded(ctx, uuid.New()), "a reservation gone: nothing")
}
