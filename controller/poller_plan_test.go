package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
)

// memStore is the poller's store in memory: the reservations it is given, and every write in order. It keeps no
// guard of its own: what it creates is what the plan decided.
type memStore struct {
	open, ended []reconcile.Tracked
	unwanted    map[uuid.UUID]bool
	writes      []string
	endedAsked  [][]uint32
}

func (m *memStore) Tracked(context.Context) ([]reconcile.Tracked, error) {
	return append([]reconcile.Tracked(nil), m.open...), nil
}

func (m *memStore) Ended(_ context.Context, ids []uint32) ([]reconcile.Tracked, error) {
	m.endedAsked = append(m.endedAsked, ids)
	return m.ended, nil
}

func (m *memStore) Bind(_ context.Context, run reconcile.RunID) (int64, error) {
	m.writes = append(m.writes, "bind "+run.String())
	for i := range m.open {
		if m.open[i].Run.Unbound() && m.open[i].Run.ArrayJobID == run.ArrayJobID && m.open[i].Run.ArrayTaskID == run.ArrayTaskID {
			m.open[i].Run = run
		}
	}
	return 1, nil
}

func (m *memStore) Ensure(_ context.Context, nrs []reconcile.NewReservation) ([]reconcile.Reservation, error) {
	var out []reconcile.Reservation
	for _, nr := range nrs {
		r := reconcile.Reservation{ID: uuid.New(), Run: nr.Run, Request: nr.Request, Spec: reconcile.Spec{Wanted: true, JobState: nr.JobState}}
		m.writes = append(m.writes, "ensure "+nr.Run.String())
		m.open = append(m.open, reconcile.Tracked{ID: r.ID, Run: r.Run, State: reconcile.StatePending, JobState: nr.JobState})
		out = append(out, r)
	}
	return out, nil
}

func (m *memStore) find(id uuid.UUID) *reconcile.Tracked {
	for i := range m.open {
		if m.open[i].ID == id {
			return &m.open[i]
		}
	}
	panic(fmt.Sprintf("no reservation %s", id))
}

func (m *memStore) ObserveJob(_ context.Context, id uuid.UUID, state, reason string) error {
	r := m.find(id)
	if r.JobState == state && r.JobReason == reason {
		return nil
	}
	r.JobState, r.JobReason = state, reason
	m.writes = append(m.writes, fmt.Sprintf("observe %s %s %q", r.Run, state, reason))
	return nil
}

// ObserveTimes writes each time once, on an open or an ended reservation, as the store does.
func (m *memStore) ObserveTimes(_ context.Context, id uuid.UUID, start, end time.Time) error {
	for _, list := range [][]reconcile.Tracked{m.open, m.ended} {
		for i := range list {
			r := &list[i]
			if r.ID != id {
				continue
			}
			if !start.IsZero() && !r.HasStart {
				r.HasStart = true
				m.writes = append(m.writes, fmt.Sprintf("start %s %s", r.Run, start.UTC().Format(time.TimeOnly)))
			}
			if !end.IsZero() && !r.HasEnd {
				r.HasEnd = true
				m.writes = append(m.writes, fmt.Sprintf("end %s %s", r.Run, end.UTC().Format(time.TimeOnly)))
			}
			return nil
		}
	}
	panic(fmt.Sprintf("no reservation %s", id))
}

// Unwant writes only what changes, as the store does.
func (m *memStore) Unwant(_ context.Context, id uuid.UUID, why string, over bool) (bool, error) {
	r := m.find(id)
	if m.unwanted[id] && (r.RunOver || !over) {
		return false, nil
	}
	if m.unwanted == nil {
		m.unwanted = map[uuid.UUID]bool{}
	}
	m.unwanted[id], r.RunOver = true, r.RunOver || over
	m.writes = append(m.writes, fmt.Sprintf("unwant %s over=%v: %s", r.Run, over, why))
	return true, nil
}

func (m *memStore) take() []string { w := m.writes; m.writes = nil; return w }

func memPoller(slurm *fakeslurm.Slurm, st *memStore) (*Poller, *enqueued) {
	e := &enqueued{}
	return &Poller{Slurm: slurm, Store: st, Cluster: "c1", Lookahead: reconcile.DefaultLookahead, Log: logr.Discard(), Enqueue: e.add}, e
}

// The poller applies its plan through the store in order (bind, create, then what it observed of each open run),
// and hands the reconciler every reservation it changed; it needs no database to be tested.
func TestPollerAppliesItsPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slurm, st := fakeslurm.New(), &memStore{}
	p, queued := memPoller(slurm, st)
	elem := reconcile.RunID{Cluster: "c1", ArrayJobID: 40, ArrayTaskID: 0}
	ahead := reconcile.Tracked{ID: uuid.New(), Run: elem, State: reconcile.StateReady, JobState: "PENDING"}
	st.open = []reconcile.Tracked{ahead}
	element := fakeslurm.JuiceJob(41, 0, slurmrest.StateConfiguring, trackReq)
	element.Array = &slurmrest.ArrayInfo{JobID: 40, TaskID: 0, HasTask: true}
	slurm.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateRunning, trackReq), element)
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{"bind c1/41.0 (40_0)", "ensure c1/1.0", `observe c1/41.0 (40_0) CONFIGURING "None"`}, st.take())
	require.Len(t, queued.ids, 2, "the bound reservation and the new one")
	require.Equal(t, ahead.ID, queued.ids[0])
	require.ElementsMatch(t, []uint32{1, 41}, st.endedAsked[0], "the ended reservations of the jobs it sees")

	// Job 1 ends, then job 41 is held: only the end makes its run over.
	slurm.Set(fakeslurm.JuiceJob(1, 0, slurmrest.StateCompleted, trackReq))
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{`observe c1/1.0 COMPLETED ""`, "unwant c1/1.0 over=true: job 1 ended: COMPLETED"}, st.take())
	require.Len(t, queued.ids, 3)

	heldJob := fakeslurm.JuiceJob(41, 0, slurmrest.StatePending, trackReq)
	heldJob.Array, heldJob.Priority, heldJob.StateReason = element.Array, 0, "JobHeldAdmin"
	slurm.Set(heldJob)
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{`observe c1/41.0 (40_0) PENDING ""`, "unwant c1/41.0 (40_0) over=false: job 41 is held (JobHeldAdmin)"},
		st.take(), "job 1's run was let go already")
	require.Len(t, queued.ids, 4)
}

// A run the store says is over is not reserved again, whatever the listing shows (a stale one after the epilog).
func TestPollerDoesNotReserveARunThatIsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slurm, st := fakeslurm.New(), &memStore{}
	p, queued := memPoller(slurm, st)
	st.ended = []reconcile.Tracked{{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 50}, State: reconcile.StateReleased, RunOver: true}}
	slurm.Set(fakeslurm.JuiceJob(50, 0, slurmrest.StateRunning, trackReq), fakeslurm.JuiceJob(51, 0, slurmrest.StateRunning, trackReq))
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{"ensure c1/51.0"}, st.take())
	require.Len(t, queued.ids, 1)
}

// Slurm's start and end of a run are recorded once each, the end on a reservation the epilog already released
// (the poller saw the job end after the release): what juice-slurm report charges as Slurm does (the cases:
// reconcile/plan's TestPlanRecordsSlurmsTimes).
func TestPollerRecordsSlurmsTimesOfARun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	slurm, st := fakeslurm.New(), &memStore{}
	p, _ := memPoller(slurm, st)
	start := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	run := reconcile.RunID{Cluster: "c1", JobID: 60}
	st.open = []reconcile.Tracked{{ID: uuid.New(), Run: run, State: reconcile.StateReady, JobState: "RUNNING", JobReason: "None"}}
	job := fakeslurm.JuiceJob(60, 0, slurmrest.StatePending, trackReq)
	job.StartTime = start // Slurm's estimate while pending: not a start
	job.State = slurmrest.StatePending
	slurm.Set(job)
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.NotContains(t, strings.Join(st.take(), "\n"), "start", "a pending job's start_time is an estimate")

	job.State = slurmrest.StateRunning
	slurm.Set(job)
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{`observe c1/60.0 RUNNING "None"`, "start c1/60.0 10:00:00"}, st.take())
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.Empty(t, st.take(), "written once")

	// The epilog released the run before the poller saw the job end.
	st.ended, st.open = st.open, nil
	st.ended[0].State = reconcile.StateReleased
	job.State, job.EndTime = slurmrest.StateCompleted, start.Add(90*time.Second)
	slurm.Set(job)
	p.Kick()
	require.NoError(t, p.Poll(ctx))
	require.Equal(t, []string{"end c1/60.0 10:01:30"}, st.take())
}
