package plan

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

var at = time.Unix(1700000000, 0)

// job is a Juice job of user alice asking pool p for one GPU, submitted job seconds before at (lower ids first).
func job(id uint32, run int, state slurmrest.JobState, prio uint64) Job {
	return Job{Job: slurmrest.Job{ID: id, Run: run, State: state, StateReason: "Priority", UserName: "alice",
		Account: "lab", Priority: prio, SubmitTime: at.Add(-time.Duration(1000-id) * time.Second)},
		Request: request.Request{Pool: "p", GPUs: 1}}
}

func held(j Job) Job { j.Priority, j.StateReason = 0, "JobHeldUser"; return j }

// remainder is array 40's pending remainder with the pending task ids.
func remainder(pending string) Job {
	j := job(40, 0, slurmrest.StatePending, 100)
	j.Array = &slurmrest.ArrayInfo{JobID: 40, Pending: pending}
	return j
}

// split is task of array 40 split off as job id.
func split(id, task uint32, state slurmrest.JobState) Job {
	j := job(id, 0, state, 100)
	j.Array = &slurmrest.ArrayInfo{JobID: 40, TaskID: task, HasTask: true}
	return j
}

func snapshot(jobs ...Job) Snapshot {
	s := Snapshot{Cluster: "c", At: at, Jobs: map[uint32]Job{}, Read: map[uint32]*slurmrest.Job{}}
	for _, j := range jobs {
		s.Jobs[j.ID] = j
	}
	return s
}

func run(id uint32, r int) reconcile.RunID { return reconcile.RunID{Cluster: "c", JobID: id, Run: r} }

func elem(task uint32) reconcile.RunID {
	return reconcile.RunID{Cluster: "c", ArrayJobID: 40, ArrayTaskID: task}
}

func rec(r reconcile.RunID, state reconcile.State, over bool) reconcile.Tracked {
	return reconcile.Tracked{ID: uuid.New(), Run: r, State: state, RunOver: over}
}

// split returns the open and ended reservations of records.
func byFinal(records []reconcile.Tracked) Runs {
	var rs Runs
	for _, r := range records {
		if r.State.Final() {
			rs.Ended = append(rs.Ended, r)
		} else {
			rs.Open = append(rs.Open, r)
		}
	}
	return rs
}

func created(ch Changes) []string {
	out := []string{}
	for _, nr := range ch.Create {
		out = append(out, nr.Run.String())
	}
	sort.Strings(out)
	return out
}

// Whether a run is reserved now, in every case the poller meets: what Slurm says of its job, the reservations the
// store keeps of it (reconcile.Reservable) and the look-ahead.
func TestPlanReservesWhatIsWantedAndFree(t *testing.T) {
	t.Parallel()
	one := reconcile.Lookahead{PerPool: 1}
	for _, c := range []struct {
		name    string
		look    reconcile.Lookahead
		jobs    []Job
		records []reconcile.Tracked
		want    []string
	}{
		{name: "a first run, running", look: one, jobs: []Job{job(1, 0, slurmrest.StateRunning, 1)}, want: []string{"c/1.0"}},
		{name: "a first run, configuring", look: one, jobs: []Job{job(1, 0, slurmrest.StateConfiguring, 1)}, want: []string{"c/1.0"}},
		{name: "a first run, suspended", look: one, jobs: []Job{job(1, 0, slurmrest.StateSuspended, 1)}, want: []string{"c/1.0"}},
		{name: "pending, picked by the look-ahead", look: one, jobs: []Job{job(1, 0, slurmrest.StatePending, 1)}, want: []string{"c/1.0"}},
		{name: "pending, over the look-ahead: the higher priority takes the place", look: one,
			jobs: []Job{job(1, 0, slurmrest.StatePending, 1), job(2, 0, slurmrest.StatePending, 5)}, want: []string{"c/2.0"}},
		{name: "pending, no look-ahead at all", look: reconcile.Lookahead{}, jobs: []Job{job(1, 0, slurmrest.StatePending, 1)}, want: []string{}},
		{name: "pending and held", look: one, jobs: []Job{held(job(1, 0, slurmrest.StatePending, 1))}, want: []string{}},
		{name: "ended or completing: never reserved", look: one,
			jobs: []Job{job(1, 0, slurmrest.StateCompleted, 1), job(2, 0, slurmrest.StateCompleting, 1)}, want: []string{}},
		{name: "pending with a live reservation: no second one, and it keeps its place", look: one,
			jobs:    []Job{job(1, 0, slurmrest.StatePending, 1), job(2, 0, slurmrest.StatePending, 0)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StatePending, false)}, want: []string{}},
		{name: "running with a live reservation", look: one, jobs: []Job{job(1, 0, slurmrest.StateRunning, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateWaiting, false)}, want: []string{}},
		{name: "failed: never again, and it takes no place in the look-ahead", look: one,
			jobs:    []Job{job(1, 0, slurmrest.StatePending, 9), job(2, 0, slurmrest.StatePending, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateFailed, false)}, want: []string{"c/2.0"}},
		{name: "over (the epilog ended it) while a stale listing shows it running", look: one,
			jobs:    []Job{job(1, 0, slurmrest.StateRunning, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateReleased, true)}, want: []string{}},
		{name: "a requeued run after a failed reservation", look: one, jobs: []Job{job(1, 1, slurmrest.StatePending, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateFailed, false)}, want: []string{"c/1.1"}},
		{name: "a requeued run after a released one", look: one, jobs: []Job{job(1, 1, slurmrest.StateConfiguring, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateReleased, true)}, want: []string{"c/1.1"}},
		{name: "released while held, and let go", look: one, jobs: []Job{job(1, 0, slurmrest.StatePending, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateReleased, false)}, want: []string{"c/1.0"}},
		{name: "released while held, still held", look: one, jobs: []Job{held(job(1, 0, slurmrest.StatePending, 1))},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateReleased, false)}, want: []string{}},
		{name: "failed, then pruned: the block is lifted", look: one, jobs: []Job{job(1, 0, slurmrest.StatePending, 1)},
			want: []string{"c/1.0"}},
		{name: "array: its next pending elements, unbound, never the remainder", look: reconcile.Lookahead{PerPool: 2},
			jobs: []Job{remainder("0-5")}, want: []string{"c/40_0.0", "c/40_1.0"}},
		{name: "array: an element that failed unbound is not reserved again (the first PerPool tasks are offered)",
			look: reconcile.Lookahead{PerPool: 2}, jobs: []Job{remainder("0-5")},
			records: []reconcile.Tracked{rec(elem(0), reconcile.StateFailed, false)}, want: []string{"c/40_1.0"}},
		{name: "array: an element that failed unbound takes no place", look: reconcile.Lookahead{PerPool: 2, PerUser: 1},
			jobs:    []Job{remainder("0-5")},
			records: []reconcile.Tracked{rec(elem(0), reconcile.StateFailed, false)}, want: []string{"c/40_1.0"}},
		{name: "array: an element reserved ahead keeps its place", look: reconcile.Lookahead{PerPool: 2},
			jobs:    []Job{remainder("0-5")},
			records: []reconcile.Tracked{rec(elem(0), reconcile.StateReady, false)}, want: []string{"c/40_1.0"}},
		{name: "array: an element split off as its job, reserved ahead, is bound, not reserved again", look: reconcile.Lookahead{PerPool: 2},
			jobs:    []Job{remainder("1-5"), split(41, 0, slurmrest.StateConfiguring)},
			records: []reconcile.Tracked{rec(elem(0), reconcile.StateWaiting, false)}, want: []string{"c/40_1.0"}},
		{name: "array: an element split off, not reserved ahead, is reserved as its job", look: reconcile.Lookahead{PerPool: 2},
			jobs: []Job{remainder("1-5"), split(41, 0, slurmrest.StateConfiguring)}, want: []string{"c/40_1.0", "c/41.0 (40_0)"}},
		{name: "array: an element whose reservation failed before it was bound is not reserved as its job",
			look: reconcile.Lookahead{PerPool: 2}, jobs: []Job{split(41, 0, slurmrest.StateRunning)},
			records: []reconcile.Tracked{rec(elem(0), reconcile.StateFailed, false)}, want: []string{}},
		{name: "array: a held remainder reserves nothing", look: reconcile.Lookahead{PerPool: 2},
			jobs: []Job{held(remainder("0-5"))}, want: []string{}},
		{name: "started and waiting for its session: takes the pool's place first", look: one,
			jobs:    []Job{job(1, 0, slurmrest.StateRunning, 0), job(2, 0, slurmrest.StatePending, 9)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateWaiting, false)}, want: []string{}},
		{name: "started and ready: leaves the pool's place to a pending job", look: one,
			jobs:    []Job{job(1, 0, slurmrest.StateRunning, 0), job(2, 0, slurmrest.StatePending, 9)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateReady, false)}, want: []string{"c/2.0"}},
	} {
		ch := Plan(snapshot(c.jobs...), byFinal(c.records), c.look, nil)
		require.Equal(t, c.want, created(ch), c.name)
		for _, nr := range ch.Create {
			require.Equal(t, request.Request{Pool: "p", GPUs: 1}, nr.Request, c.name)
			require.Equal(t, "alice", nr.UserName, c.name)
			require.Equal(t, "lab", nr.Account, c.name)
		}
	}
}

// A new reservation says who saw the run and what it reserves; an array's element reserved ahead is described by
// its remainder.
func TestPlanNewReservationReason(t *testing.T) {
	t.Parallel()
	ch := Plan(snapshot(job(1, 0, slurmrest.StateRunning, 1), remainder("3")), Runs{}, reconcile.Lookahead{PerPool: 2}, nil)
	require.Len(t, ch.Create, 2)
	require.Equal(t, elem(3), ch.Create[0].Run)
	require.Equal(t, "array element 40_3 PENDING: reserving 1 GPU from pool p", ch.Create[0].Reason)
	require.Equal(t, "PENDING", ch.Create[0].JobState)
	require.Equal(t, "job 1 RUNNING: reserving 1 GPU from pool p", ch.Create[1].Reason)
	require.Equal(t, "RUNNING", ch.Create[1].JobState)
}

// A new reservation carries what Slurm says of its job, its pending reason too: the next plan over the same snapshot
// has nothing to record (the reason once went unstored, and every reservation paid a write, a NOTIFY and a read).
func TestPlanNewReservationNeedsNoSecondWrite(t *testing.T) {
	t.Parallel()
	snap := snapshot(job(1, 0, slurmrest.StatePending, 1), job(2, 0, slurmrest.StateRunning, 1))
	j2 := snap.Jobs[2]
	j2.StateReason = "None"
	snap.Jobs[2] = j2
	ch := Plan(snap, Runs{}, reconcile.Lookahead{PerPool: 2}, nil)
	require.Len(t, ch.Create, 2)
	var open []reconcile.Tracked
	for _, nr := range ch.Create {
		open = append(open, reconcile.Tracked{ID: uuid.New(), Run: nr.Run, State: reconcile.StatePending,
			JobState: nr.JobState, JobReason: nr.JobReason})
	}
	require.Equal(t, []string{"Priority", "None"}, []string{open[0].JobReason, open[1].JobReason})
	for _, o := range Plan(snap, Runs{Open: open}, reconcile.Lookahead{PerPool: 2}, nil).Observe {
		require.False(t, o.Record, "job %d: %+v", o.Run.JobID, o)
	}
}

// What Slurm says of each open run's job: recorded when it changed; the run let go when its job ended, was
// requeued, vanished (confirmed by a GET) or is held, and only a hold leaves the run open.
func TestPlanObservesOpenRuns(t *testing.T) {
	t.Parallel()
	pending, running := job(1, 0, slurmrest.StatePending, 1), job(1, 0, slurmrest.StateRunning, 1)
	for _, c := range []struct {
		name  string
		jobs  []Job
		read  map[uint32]*slurmrest.Job
		open  reconcile.Tracked
		want  Observation
		quiet bool // nothing to write
	}{
		{name: "unchanged", jobs: []Job{pending},
			open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StatePending, JobState: "PENDING", JobReason: "Priority"}, quiet: true},
		{name: "its reason changed", jobs: []Job{pending},
			open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StatePending, JobState: "PENDING", JobReason: "Resources"},
			want: Observation{Record: true, JobState: "PENDING", JobReason: "Priority"}},
		{name: "ended", jobs: []Job{job(1, 0, slurmrest.StateCompleted, 1)}, open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "COMPLETED", Unwant: true, Why: "job 1 ended: COMPLETED", Over: true}},
		{name: "completing", jobs: []Job{job(1, 0, slurmrest.StateCompleting, 1)}, open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "COMPLETING", Unwant: true, Why: "job 1 ended: COMPLETING", Over: true}},
		{name: "requeued", jobs: []Job{job(1, 1, slurmrest.StatePending, 1)},
			open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateReady, JobState: "PENDING"},
			want: Observation{JobState: "PENDING", Unwant: true, Why: "job 1 was requeued: run 1 replaces run 0", Over: true}},
		{name: "held: let go, the run stays open", jobs: []Job{held(pending)}, open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateWaiting},
			want: Observation{Record: true, JobState: "PENDING", Unwant: true, Why: "job 1 is held (JobHeldUser)", Over: false}},
		{name: "a listing older than the prolog that registered a requeued run", jobs: []Job{job(1, 0, slurmrest.StateRunning, 1)},
			open: reconcile.Tracked{Run: run(1, 1), State: reconcile.StatePending}, quiet: true},
		{name: "missing, a GET says gone", read: map[uint32]*slurmrest.Job{1: nil}, open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "GONE", Unwant: true, Why: "job 1 is gone from slurmctld", Over: true}},
		{name: "missing, a GET finds it running", read: map[uint32]*slurmrest.Job{1: &running.Job},
			open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "RUNNING", JobReason: "Priority"}},
		{name: "missing and not read: judged later", open: reconcile.Tracked{Run: run(1, 0), State: reconcile.StateReady}, quiet: true},
		{name: "an element still pending", jobs: []Job{remainder("0-5")}, open: reconcile.Tracked{Run: elem(2), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "PENDING", JobReason: "Priority"}},
		{name: "an element cancelled while pending", jobs: []Job{remainder("3-5")}, open: reconcile.Tracked{Run: elem(2), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "GONE", Unwant: true, Why: "array element 40_2 is no longer pending", Over: true}},
		{name: "an element whose array is gone", open: reconcile.Tracked{Run: elem(2), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "GONE", Unwant: true, Why: "array element 40_2 is no longer pending", Over: true}},
		{name: "an element of a held array: let go, the run stays open", jobs: []Job{held(remainder("0-5"))},
			open: reconcile.Tracked{Run: elem(2), State: reconcile.StateReady},
			want: Observation{Record: true, JobState: "PENDING", Unwant: true, Why: "array 40 is held (JobHeldUser)", Over: false}},
		{name: "an element past slurmctld's cut-short text", jobs: []Job{remainder("0-3,...")},
			open: reconcile.Tracked{Run: elem(9), State: reconcile.StateReady}, quiet: true},
		{name: "an element split off: bound, then observed as its job", jobs: []Job{remainder("1-5"), split(41, 0, slurmrest.StateRunning)},
			open: reconcile.Tracked{Run: elem(0), State: reconcile.StateReady},
			want: Observation{Run: elem(0).Bound(41), Record: true, JobState: "RUNNING", JobReason: "Priority"}},
	} {
		snap := snapshot(c.jobs...)
		if c.read != nil {
			snap.Read = c.read
		}
		c.open.ID = uuid.New()
		ch := Plan(snap, Runs{Open: []reconcile.Tracked{c.open}}, reconcile.Lookahead{}, nil)
		if c.quiet {
			require.Empty(t, ch.Observe, c.name)
			continue
		}
		require.Len(t, ch.Observe, 1, c.name)
		c.want.ID = c.open.ID
		if c.want.Run == (reconcile.RunID{}) {
			c.want.Run = c.open.Run
		}
		require.Equal(t, c.want, ch.Observe[0], c.name)
	}
}

// An element reserved ahead is bound to the job slurmctld split it off as, only with the same run; the runs to
// track are the open ones that have a job id, bound ones included.
func TestPlanBindsElementsAndTracksBoundRuns(t *testing.T) {
	t.Parallel()
	open := []reconcile.Tracked{
		rec(elem(0), reconcile.StateReady, false), rec(elem(1), reconcile.StateReady, false),
		rec(elem(2), reconcile.StateReady, false), rec(run(7, 0), reconcile.StateReady, false),
	}
	requeued := split(42, 1, slurmrest.StatePending)
	requeued.Run = 1 // not the run reserved ahead
	ch := Plan(snapshot(remainder("2-5"), split(41, 0, slurmrest.StateRunning), requeued, job(7, 0, slurmrest.StateRunning, 1)),
		Runs{Open: open}, reconcile.Lookahead{}, nil)
	require.Equal(t, []Bind{{ID: open[0].ID, Run: elem(0).Bound(41)}}, ch.Bind)
	require.Equal(t, []reconcile.RunID{elem(0).Bound(41), run(7, 0)}, ch.Track)
	require.Equal(t, elem(0), open[0].Run, "the caller's reservations are not changed")
}

// The jobs of open runs missing from the listing are read, once each; elements reserved ahead have none.
func TestMissing(t *testing.T) {
	t.Parallel()
	jobs := snapshot(job(1, 0, slurmrest.StateRunning, 1)).Jobs
	open := []reconcile.Tracked{rec(run(1, 0), reconcile.StateReady, false), rec(run(2, 0), reconcile.StateReleasing, false),
		rec(run(2, 1), reconcile.StatePending, false), rec(elem(3), reconcile.StateReady, false), rec(run(3, 0), reconcile.StateReady, false)}
	require.Equal(t, []uint32{2, 3}, Missing(jobs, open))
}

// An array whose pending elements cannot be read reserves none of them, and says so.
func TestPlanReportsUnreadArrays(t *testing.T) {
	t.Parallel()
	ch := Plan(snapshot(remainder("x-y"), job(1, 0, slurmrest.StateRunning, 1)), Runs{}, reconcile.Lookahead{PerPool: 2}, nil)
	require.Equal(t, []string{"c/1.0"}, created(ch))
	require.Len(t, ch.Unread, 1)
	require.Contains(t, fmt.Sprint(ch.Unread[0]), "array 40")
}

// When Slurm started and ended a run is recorded once each, for open and ended reservations alike, and only from
// the job at that run: a pending job's start_time is Slurm's estimate, a running job's end_time its time limit,
// and a requeued job's times are its new run's.
func TestPlanRecordsSlurmsTimes(t *testing.T) {
	start, end := at.Add(-time.Hour), at.Add(-time.Minute)
	timed := func(j Job) Job { j.StartTime, j.EndTime = start, end; return j }
	known := func(r reconcile.Tracked, s, e bool) reconcile.Tracked { r.HasStart, r.HasEnd = s, e; return r }
	for _, c := range []struct {
		name  string
		job   Job
		rec   reconcile.Tracked
		start bool // want the start written
		end   bool // want the end written
	}{
		{"pending: an estimate", timed(job(1, 0, slurmrest.StatePending, 1)), rec(run(1, 0), reconcile.StateReady, false), false, false},
		{"configuring", timed(job(1, 0, slurmrest.StateConfiguring, 1)), rec(run(1, 0), reconcile.StateRequesting, false), true, false},
		{"running: the end is the time limit", timed(job(1, 0, slurmrest.StateRunning, 1)), rec(run(1, 0), reconcile.StateReady, false), true, false},
		{"running, start known", timed(job(1, 0, slurmrest.StateRunning, 1)), known(rec(run(1, 0), reconcile.StateReady, false), true, false), false, false},
		{"completing", timed(job(1, 0, slurmrest.StateCompleting, 1)), rec(run(1, 0), reconcile.StateReady, false), true, false},
		{"completed, released by the epilog", timed(job(1, 0, slurmrest.StateCompleted, 1)), rec(run(1, 0), reconcile.StateReleased, true), true, true},
		{"completed, start known", timed(job(1, 0, slurmrest.StateCompleted, 1)), known(rec(run(1, 0), reconcile.StateReleased, true), true, false), false, true},
		{"completed, both known", timed(job(1, 0, slurmrest.StateCompleted, 1)), known(rec(run(1, 0), reconcile.StateReleased, true), true, true), false, false},
		{"cancelled while pending: start = end", timed(job(1, 0, slurmrest.StateCancelled, 1)), rec(run(1, 0), reconcile.StateReleased, false), true, true},
		{"requeued: run 1's times", timed(job(1, 1, slurmrest.StateCompleted, 1)), rec(run(1, 0), reconcile.StateReleased, false), false, false},
		{"an element reserved ahead", timed(remainder("1-3")), rec(elem(1), reconcile.StateReady, false), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ch := Plan(snapshot(c.job), byFinal([]reconcile.Tracked{c.rec}), reconcile.Lookahead{}, nil)
			want := Times{ID: c.rec.ID}
			if c.start {
				want.Start = start
			}
			if c.end {
				want.End = end
			}
			if !c.start && !c.end {
				require.Empty(t, ch.Times)
				return
			}
			require.Equal(t, []Times{want}, ch.Times)
		})
	}
}

// In a pool with hand-off on, a pending job alike to one Slurm started (same user, account and request) takes that
// run's session when it ends: it is not reserved ahead. Another user's, another account's or another request's job
// is, and so is every job in a pool without hand-off, or where the like job has ended.
func TestPlanLeavesHeirsToTheirHandoff(t *testing.T) {
	t.Parallel()
	look := reconcile.Lookahead{PerPool: 8}
	other := func(j Job, f func(*Job)) Job { f(&j); return j }
	jobs := []Job{
		job(1, 0, slurmrest.StateRunning, 9),
		job(2, 0, slurmrest.StatePending, 5),
		remainder("0-3"),
		other(job(3, 0, slurmrest.StatePending, 5), func(j *Job) { j.UserName = "bob" }),
		other(job(4, 0, slurmrest.StatePending, 5), func(j *Job) { j.Account = "other" }),
		other(job(5, 0, slurmrest.StatePending, 5), func(j *Job) { j.Request.GPUs = 2 }),
		other(job(6, 0, slurmrest.StatePending, 5), func(j *Job) { j.Request.Pool = "q" }),
	}
	records := []reconcile.Tracked{rec(run(1, 0), reconcile.StateReady, false)}
	on := func(pool string) bool { return pool == "p" }
	require.Equal(t, []string{"c/3.0", "c/4.0", "c/5.0", "c/6.0"}, created(Plan(snapshot(jobs...), byFinal(records), look, on)))

	all := []string{"c/2.0", "c/3.0", "c/4.0", "c/40_0.0", "c/40_1.0", "c/40_2.0", "c/40_3.0", "c/5.0", "c/6.0"}
	require.Equal(t, all, created(Plan(snapshot(jobs...), byFinal(records), look, nil)), "no pool hands on")
	require.Equal(t, all, created(Plan(snapshot(jobs...), byFinal(records), look, func(string) bool { return false })))

	jobs[0] = job(1, 0, slurmrest.StateCompleting, 9)
	require.Equal(t, all, created(Plan(snapshot(jobs...), byFinal(records), look, on)), "the like job ended: nothing to take")

	jobs[0] = job(1, 0, slurmrest.StateConfiguring, 9)
	require.Equal(t, []string{"c/1.0", "c/3.0", "c/4.0", "c/5.0", "c/6.0"}, created(Plan(snapshot(jobs...), Runs{}, look, on)),
		"a like job started, its session not asked for yet: it is reserved, its heirs are not")
}

// A pending run that let its pool go to a run Slurm started (a yield: released, its run not over, while its job
// pended) is not reserved ahead again while a started run of that pool still waits for GPUs: its session would
// queue behind that run's and be let go again, a session asked for and cancelled at every poll. Once the started
// run has its GPUs, or in another pool, it is reserved as before; a pending run that never yielded is too.
func TestPlanDoesNotReserveAgainARunThatYieldedWhileAStartedOneWaits(t *testing.T) {
	t.Parallel()
	look := reconcile.Lookahead{PerPool: 4}
	yielded := func(r reconcile.RunID) reconcile.Tracked {
		return reconcile.Tracked{ID: uuid.New(), Run: r, State: reconcile.StateReleased, JobState: "PENDING"}
	}
	started := job(1, 0, slurmrest.StateRunning, 0)
	elsewhere := job(1, 0, slurmrest.StateRunning, 0)
	elsewhere.Request.Pool = "q"
	for _, c := range []struct {
		name    string
		jobs    []Job
		records []reconcile.Tracked
		want    []string
	}{
		{name: "yielded, the started run waits: not again, a fresh pending run is",
			jobs:    []Job{started, job(2, 0, slurmrest.StatePending, 9), job(3, 0, slurmrest.StatePending, 1)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateWaiting, false), yielded(run(2, 0))}, want: []string{"c/3.0"}},
		{name: "yielded, the started run has its GPUs: reserved again",
			jobs:    []Job{started, job(2, 0, slurmrest.StatePending, 9)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateReady, false), yielded(run(2, 0))}, want: []string{"c/2.0"}},
		{name: "yielded, the started run that waits is another pool's: reserved again",
			jobs:    []Job{elsewhere, job(2, 0, slurmrest.StatePending, 9)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateWaiting, false), yielded(run(2, 0))}, want: []string{"c/2.0"}},
		{name: "an array's element that yielded, the started run waits: not again, the next element is",
			jobs:    []Job{started, remainder("0-5")},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateWaiting, false), yielded(elem(0))}, want: []string{"c/40_1.0", "c/40_2.0", "c/40_3.0"}},
		{name: "released after its job started (not a yield): a requeued run of it is reserved",
			jobs: []Job{started, job(2, 1, slurmrest.StatePending, 9)},
			records: []reconcile.Tracked{rec(run(1, 0), reconcile.StateWaiting, false),
				{ID: uuid.New(), Run: run(2, 0), State: reconcile.StateReleased, RunOver: true, JobState: "RUNNING"}}, want: []string{"c/2.1"}},
	} {
		ch := Plan(snapshot(c.jobs...), byFinal(c.records), look, nil)
		require.Equal(t, c.want, created(ch), c.name)
	}
}
