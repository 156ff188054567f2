// Package plan is the poller's decision, apart from its observation of Slurm. From a snapshot of the Juice jobs
// (what the poller's Slurm cache saw), the reservations the store keeps of their runs and the look-ahead policy,
// Plan says which array elements reserved ahead to bind to their job, which runs to reserve, which runs no longer
// want their session, and what to record of each open run's job. It does no I/O: the poller reads the snapshot and
// the reservations, and applies the plan through the store.
//
// Whether a run may be reserved (first or again) is reconcile.Reservable's to say, from the run's own
// reservations; whether a pending run is reserved now is the look-ahead's (reconcile.Lookahead.Select); what a
// release records for Reservable to read later is reconcile.Release.EndsRun.
package plan

import (
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// A Job is a Juice job as slurmctld shows it, with the request it carries (trusted: controller.JobRequest).
type Job struct {
	slurmrest.Job
	Request request.Request
}

// A Snapshot is what the Slurm cache knows of the cluster's Juice jobs at one time.
type Snapshot struct {
	Cluster string
	At      time.Time
	// Jobs are the Juice jobs slurmctld lists, by id: the last listing's, as tracked and discovered since. An
	// array's pending remainder is one of them, under the array's job id. Plan does not change it.
	Jobs map[uint32]Job
	// Read is what one GET said of each open run's job missing from Jobs (see Missing), Juice job or not; nil for
	// a job slurmctld no longer knows.
	Read map[uint32]*slurmrest.Job
}

// JobIDs lists the snapshot's job ids: the jobs whose ended reservations the plan needs (Runs.Ended).
func (s Snapshot) JobIDs() []uint32 {
	ids := make([]uint32, 0, len(s.Jobs))
	for id := range s.Jobs {
		ids = append(ids, id)
	}
	return ids
}

// Missing returns the job ids of the open runs whose job the listing does not show: the job aged out of slurmctld
// after it ended, its request is gone, or the listing is older than the prolog that registered the run. One GET
// each tells which (Snapshot.Read). An array element reserved ahead has no job of its own to read.
func Missing(jobs map[uint32]Job, open []reconcile.Tracked) []uint32 {
	var ids []uint32
	asked := map[uint32]bool{}
	for _, r := range open {
		if _, ok := jobs[r.Run.JobID]; ok || r.Run.Unbound() || asked[r.Run.JobID] {
			continue
		}
		asked[r.Run.JobID] = true
		ids = append(ids, r.Run.JobID)
	}
	return ids
}

// Runs are the reservations the store keeps of the runs a snapshot shows.
type Runs struct {
	// Open are the open reservations (store.Store.Tracked), oldest first: each is observed.
	Open []reconcile.Tracked
	// Ended are the final reservations of the snapshot's jobs and of their arrays' elements (store.Store.Ended).
	Ended []reconcile.Tracked
}

// Changes is a plan: what the poller applies, in this order.
type Changes struct {
	// Bind: array elements reserved ahead that slurmctld now shows as jobs of their own; each Run is the element's
	// run with its job id.
	Bind []Bind
	// Create: the runs to reserve, each wanted now and free (reconcile.Reservable).
	Create []reconcile.NewReservation
	// Observe: what to record of each open run's job, and the runs that no longer want their session.
	Observe []Observation
	// Times: Slurm's start and end of runs' jobs to record, for open and ended reservations alike.
	Times []Times
	// Track: the open reservations' runs that have a job id, for the cache to track between listings.
	Track []reconcile.RunID
	// Unread: what the plan could not read of the snapshot, for the log.
	Unread []error
}

// Bind binds the open reservation ID, made ahead for an array element, to the element's job (Run.JobID).
type Bind struct {
	ID  uuid.UUID
	Run reconcile.RunID
}

// Times are when Slurm started and ended the run of reservation ID (zero: not to write): the job's start_time
// and end_time, which sacct and sreport charge its licenses by.
type Times struct {
	ID         uuid.UUID
	Start, End time.Time
}

// An Observation is what Slurm says of one open reservation's job.
type Observation struct {
	ID  uuid.UUID
	Run reconcile.RunID
	// Record: JobState and JobReason differ from what the spec holds and are written.
	Record              bool
	JobState, JobReason string
	// Unwant: the run no longer wants its session, Why; Over: the release ends the run (Release.EndsRun).
	Unwant bool
	Why    string
	Over   bool
}

// Plan decides, for the snapshot's Juice jobs and the open reservations, what the poller changes:
//
//   - binds each open reservation of an array element reserved ahead to the job id slurmctld gave the element,
//     once the snapshot shows the element as a job of its own with the same run;
//   - reserves each run that is free (reconcile.Reservable) and wanted now: CONFIGURING, RUNNING or SUSPENDED, or
//     PENDING and picked by the look-ahead (an array's next pending elements, one candidate each). A run that is
//     Over takes no place in the look-ahead; a live one keeps its place; in a pool with hand-off on (handoff, nil:
//     none), a pending run that a like job runs ahead of is an heir (reconcile.Candidate.Heir);
//   - lets go each open run whose job ended, was requeued (a new run replaces it), is held, or vanished (for a
//     hold, without ending the run);
//   - records each open run's job state and pending reason when they changed;
//   - records when Slurm started and ended each run, open or ended, once it has (times).
func Plan(snap Snapshot, runs Runs, look reconcile.Lookahead, handoff func(pool string) bool) Changes {
	var ch Changes
	open := append([]reconcile.Tracked(nil), runs.Open...)
	ch.Bind = bind(snap, open)
	rs := reservations(open, runs.Ended)
	ch.Create, ch.Unread = reserve(snap, rs, look, running(snap, handoff))
	for i := range open {
		r := &open[i]
		if o, ok := observe(snap, r); ok {
			ch.Observe = append(ch.Observe, o)
		}
		if !r.Run.Unbound() {
			ch.Track = append(ch.Track, r.Run)
		}
	}
	for _, list := range [][]reconcile.Tracked{open, runs.Ended} {
		for i := range list {
			if t, ok := times(snap, &list[i]); ok {
				ch.Times = append(ch.Times, t)
			}
		}
	}
	return ch
}

// times says when Slurm started and ended r's run, where the snapshot shows the job at that run and r does not
// have them yet. A start_time counts once the job has started (before, it is Slurm's estimate); an end_time once
// it has ended (before, it is the time limit's). A job cancelled while pending has both, equal: no time.
func times(snap Snapshot, r *reconcile.Tracked) (Times, bool) {
	if r.Run.Unbound() || (r.HasStart && r.HasEnd) {
		return Times{}, false
	}
	var j *slurmrest.Job
	if job, listed := snap.Jobs[r.Run.JobID]; listed {
		j = &job.Job
	} else if j = snap.Read[r.Run.JobID]; j == nil {
		return Times{}, false
	}
	if j.Run != r.Run.Run {
		return Times{}, false
	}
	var t Times
	ended := j.State.IsFinished()
	if !r.HasStart && !j.StartTime.IsZero() && (ended || j.State == slurmrest.StateCompleting || reconcile.Started(string(j.State))) {
		t.Start = j.StartTime
	}
	if !r.HasEnd && ended && !j.EndTime.IsZero() {
		t.End = j.EndTime
	}
	if t.Start.IsZero() && t.End.IsZero() {
		return Times{}, false
	}
	t.ID = r.ID
	return t, true
}

// bind finds the open reservations of array elements reserved ahead whose element the snapshot shows as a job of
// its own, and binds them in open.
func bind(snap Snapshot, open []reconcile.Tracked) []Bind {
	type element struct{ array, task uint32 }
	var split map[element]uint32
	var out []Bind
	for i := range open {
		r := &open[i]
		if !r.Run.Unbound() {
			continue
		}
		if split == nil {
			split = map[element]uint32{}
			for _, j := range snap.Jobs {
				if j.Array != nil && j.Array.HasTask {
					split[element{j.Array.JobID, j.Array.TaskID}] = j.ID
				}
			}
		}
		job, ok := split[element{r.Run.ArrayJobID, r.Run.ArrayTaskID}]
		if !ok || snap.Jobs[job].Run != r.Run.Run {
			continue
		}
		r.Run = r.Run.Bound(job)
		out = append(out, Bind{ID: r.ID, Run: r.Run})
	}
	return out
}

// runKey names a run as the store's unique indexes do: an array's element by its array, task and run, bound to a
// job id or not; any other run by its job id and run.
type runKey struct {
	job, array, task uint32
	run              int
}

func keyOf(r reconcile.RunID) runKey {
	if r.Element() {
		return runKey{array: r.ArrayJobID, task: r.ArrayTaskID, run: r.Run}
	}
	return runKey{job: r.JobID, run: r.Run}
}

// runReservations are the reservations the store keeps, by run.
type runReservations map[runKey][]reconcile.Tracked

func reservations(open, ended []reconcile.Tracked) runReservations {
	rs := runReservations{}
	for _, list := range [][]reconcile.Tracked{open, ended} {
		for _, r := range list {
			k := keyOf(r.Run)
			rs[k] = append(rs[k], r)
		}
	}
	return rs
}

// standing is where run stands before a new reservation (reconcile.Reservable of its reservations).
func (rs runReservations) standing(run reconcile.RunID) reconcile.Standing {
	return reconcile.Reservable(rs[keyOf(run)])
}

// yielded reports whether run let its pool go while its job was pending (reconcile.Yielded).
func (rs runReservations) yielded(run reconcile.RunID) bool { return reconcile.Yielded(rs[keyOf(run)]) }

// starved returns the pools in which a run Slurm started waits with its session queued: the look-ahead does not
// reserve again there a pending run that yielded (reconcile.Yielded) until that run has its GPUs.
func starved(snap Snapshot, rs runReservations) map[string]bool {
	m := map[string]bool{}
	for id := range snap.Jobs {
		j := snap.Jobs[id]
		if j.Remainder() || !reconcile.Started(string(j.State)) {
			continue
		}
		if run := runOf(snap.Cluster, &j); rs.has(run, reconcile.StateWaiting) {
			m[j.Request.Pool] = true
		}
	}
	return m
}

// has reports whether run has a reservation in state st: a started run with a ready one takes no place in the
// look-ahead; one with a waiting one (its session queued) starves its pool (starved).
func (rs runReservations) has(run reconcile.RunID, st reconcile.State) bool {
	for _, r := range rs[keyOf(run)] {
		if r.State == st {
			return true
		}
	}
	return false
}

// running returns the likenesses of the snapshot's jobs that Slurm started in pools with hand-off on: a pending job
// alike to one of them is that run's heir.
func running(snap Snapshot, handoff func(pool string) bool) map[reconcile.Likeness]bool {
	if handoff == nil {
		return nil
	}
	m := map[reconcile.Likeness]bool{}
	for _, j := range snap.Jobs {
		if j.UserName != "" && reconcile.Started(string(j.State)) && handoff(j.Request.Pool) {
			m[j.Likeness()] = true
		}
	}
	return m
}

// Likeness is what the job's runs share with runs they may hand a session to, or take one from (reconcile.MayTake).
func (j *Job) Likeness() reconcile.Likeness {
	return reconcile.Likeness{User: j.UserName, Account: j.Account, Request: j.Request}
}

// reserve returns the runs to reserve now: those wanted (started, or picked by the look-ahead among the pending
// ones that are not Over) and free. They are in order of job, array, task and run. heirs are the likenesses of
// started jobs whose pending like jobs take their sessions (running).
func reserve(snap Snapshot, rs runReservations, look reconcile.Lookahead, heirs map[reconcile.Likeness]bool) ([]reconcile.NewReservation, []error) {
	var cands []reconcile.Candidate
	var unread []error
	want := map[reconcile.RunID]bool{}
	hungry := starved(snap, rs)
	// yieldedHere is whether run, a pending one of job j, yielded its pool to a started run that still waits: the
	// look-ahead leaves it out.
	yieldedHere := func(j *Job, run reconcile.RunID) bool { return hungry[j.Request.Pool] && rs.yielded(run) }
	for id := range snap.Jobs {
		j := snap.Jobs[id]
		if j.Remainder() {
			// An array's pending remainder is not a run: its next pending elements are, each a candidate.
			if j.State != slurmrest.StatePending || j.Held() {
				continue
			}
			tasks, err := j.Array.PendingTasks(look.ArrayCandidates())
			if err != nil {
				unread = append(unread, fmt.Errorf("array %d's pending elements, none reserved ahead: %w", j.ID, err))
				continue
			}
			for _, t := range tasks {
				if run := element(snap.Cluster, &j, t); rs.standing(run) != reconcile.Over && !yieldedHere(&j, run) {
					cands = append(cands, candidate(&j, run, heirs))
				}
			}
			continue
		}
		run := runOf(snap.Cluster, &j)
		if rs.standing(run) == reconcile.Over {
			continue
		}
		switch j.State {
		case slurmrest.StatePending:
			if !j.Held() && !yieldedHere(&j, run) {
				cands = append(cands, candidate(&j, run, heirs))
			}
		case slurmrest.StateConfiguring, slurmrest.StateRunning, slurmrest.StateSuspended:
			want[run] = true
			if !rs.has(run, reconcile.StateReady) {
				c := candidate(&j, run, nil)
				c.Started = true
				cands = append(cands, c)
			}
		}
	}
	for run := range look.Select(snap.At, cands) {
		want[run] = true
	}
	var news []reconcile.NewReservation
	for run := range want {
		if rs.standing(run) != reconcile.Free {
			continue
		}
		j := snap.Jobs[run.JobID]
		what := fmt.Sprintf("job %d", j.ID)
		if run.Unbound() {
			j = snap.Jobs[run.ArrayJobID]
			what = fmt.Sprintf("array element %d_%d", run.ArrayJobID, run.ArrayTaskID)
		}
		news = append(news, reconcile.NewReservation{Run: run, Request: j.Request, UserName: j.UserName, Account: j.Account,
			Partition: j.Partition, JobState: string(j.State), JobReason: j.StateReason,
			Reason: fmt.Sprintf("%s %s: reserving %s", what, j.State, j.Request.Describe())})
	}
	sort.Slice(news, func(a, b int) bool {
		x, y := news[a].Run, news[b].Run
		if x.JobID != y.JobID {
			return x.JobID < y.JobID
		}
		if x.ArrayJobID != y.ArrayJobID {
			return x.ArrayJobID < y.ArrayJobID
		}
		if x.ArrayTaskID != y.ArrayTaskID {
			return x.ArrayTaskID < y.ArrayTaskID
		}
		return x.Run < y.Run
	})
	return news, unread
}

// observe says what Slurm says of one open reservation's job; ok is false when there is nothing to write.
func observe(snap Snapshot, r *reconcile.Tracked) (o Observation, ok bool) {
	if r.Run.Unbound() {
		return observeElement(snap, r)
	}
	var j *slurmrest.Job
	if job, listed := snap.Jobs[r.Run.JobID]; listed {
		j = &job.Job
	} else {
		got, read := snap.Read[r.Run.JobID]
		switch {
		case !read:
			return Observation{}, false // not read: judged at the next poll
		case got == nil:
			return unwant(r, "GONE", fmt.Sprintf("job %d is gone from slurmctld", r.Run.JobID), reconcile.ReleaseGone), true
		}
		// Read: a listing older than the prolog that registered the run, or a job whose admin_comment no longer
		// carries the request. Either way it lives.
		j = got
	}
	state := string(j.State)
	switch {
	case j.Run > r.Run.Run:
		return unwant(r, state, fmt.Sprintf("job %d was requeued: run %d replaces run %d", j.ID, j.Run, r.Run.Run), reconcile.ReleaseRequeued), true
	case j.Run < r.Run.Run:
		return Observation{}, false // a listing older than the prolog that registered this run
	case j.State.IsFinished() || j.State == slurmrest.StateCompleting:
		return unwant(r, state, fmt.Sprintf("job %d ended: %s", j.ID, j.State), reconcile.ReleaseEnded), true
	case j.Held():
		// Held: the GPUs go back to the pool, and the run is reserved again once the job is let go.
		return unwant(r, state, fmt.Sprintf("job %d is held (%s)", j.ID, j.StateReason), reconcile.ReleaseHeld), true
	}
	return record(r, state, j.StateReason)
}

// observeElement says what Slurm says of an array element reserved ahead, still in its array's remainder.
func observeElement(snap Snapshot, r *reconcile.Tracked) (Observation, bool) {
	j, listed := snap.Jobs[r.Run.ArrayJobID]
	pending, known := false, true
	if listed {
		pending, known = j.Array.StillPending(r.Run.ArrayTaskID)
	}
	switch {
	case !known:
		return Observation{}, false // slurmctld's text of the pending elements was cut short before this one
	case !pending:
		// Not pending in the remainder, and not a job of its own (bind found none): cancelled while pending.
		return unwant(r, "GONE", fmt.Sprintf("array element %d_%d is no longer pending", r.Run.ArrayJobID, r.Run.ArrayTaskID),
			reconcile.ReleaseGone), true
	case j.Held():
		return unwant(r, string(j.State), fmt.Sprintf("array %d is held (%s)", j.ID, j.StateReason), reconcile.ReleaseHeld), true
	}
	return record(r, string(j.State), j.StateReason)
}

// record writes the job's state and reason into the spec when they changed.
func record(r *reconcile.Tracked, state, reason string) (Observation, bool) {
	if r.JobState == state && r.JobReason == reason {
		return Observation{}, false
	}
	return Observation{ID: r.ID, Run: r.Run, Record: true, JobState: state, JobReason: reason}, true
}

// unwant records the job's state (its pending reason no longer matters) and that the run no longer wants its
// session, for the release's reason; the reconciler releases it.
func unwant(r *reconcile.Tracked, state, why string, release reconcile.Release) Observation {
	o, _ := record(r, state, "")
	o.ID, o.Run, o.JobState = r.ID, r.Run, state
	o.Unwant, o.Why, o.Over = true, why, release.EndsRun()
	return o
}

// runOf is the run of a job slurmctld shows as a job of its own (an array's element split off included).
func runOf(cluster string, j *Job) reconcile.RunID {
	run := reconcile.RunID{Cluster: cluster, JobID: j.ID, Run: j.Run}
	if j.Array != nil && j.Array.HasTask {
		run.ArrayJobID, run.ArrayTaskID = j.Array.JobID, j.Array.TaskID
	}
	return run
}

// element is the run of task of the array whose remainder is j: not started, so without a job id of its own.
func element(cluster string, j *Job, task uint32) reconcile.RunID {
	return reconcile.RunID{Cluster: cluster, Run: 0, ArrayJobID: j.Array.JobID, ArrayTaskID: task}
}

func candidate(j *Job, run reconcile.RunID, heirs map[reconcile.Likeness]bool) reconcile.Candidate {
	return reconcile.Candidate{Run: run, Request: j.Request, User: j.UserName, Account: j.Account, Priority: j.Priority,
		SubmitTime: j.SubmitTime, StateReason: j.StateReason, ExpectedStart: j.StartTime, BeginTime: j.EligibleTime,
		Heir: j.UserName != "" && heirs[j.Likeness()]}
}
