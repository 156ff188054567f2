package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Slurm is what the controller asks of slurmrestd. *slurmrest.Client implements it, whatever API version it
// negotiated; test/fakeslurm scripts it.
type Slurm interface {
	ListJobs(ctx context.Context, since time.Time) (slurmrest.JobList, error)
	GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error)
	UpdateJob(ctx context.Context, id uint32, u slurmrest.JobUpdate) error
	// CanTrackStates and JobStates: the cheap state of known jobs (API v0.0.40+; 22.05 has none, and the poller
	// then lists at every poll).
	CanTrackStates(ctx context.Context) (bool, error)
	JobStates(ctx context.Context, ids []uint32) ([]slurmrest.JobStatus, error)
	AllJobStates(ctx context.Context) ([]slurmrest.JobStatus, error)
}

// ListPace paces the full listings of the queue when the open reservations' jobs can be tracked by their states.
// A listing is what discovers new Juice jobs and feeds the look-ahead, and with update_time it is all or nothing:
// any change anywhere returns the whole queue (2.5 to 3 s of slurmctld and slurmrestd work with 10,000 queued jobs
// on 22.05, issue 14). So the next listing comes no sooner than Factor times the wall time the last one took, and
// no later than Max after it ended: never skipped for ever.
type ListPace struct {
	// Factor: the next listing waits Factor × the last listing's wall time. Default 10: the controller's listings
	// then keep slurmrestd and slurmctld busy at most 1/(Factor+1), about 9% of the time, however long the queue;
	// a queue that lists in 50 ms is still listed about every poll, and one "nothing changed" reply (cheap) does
	// not hold the next listing back.
	Factor float64
	// Min is the least time between two listings (default 0: at most one per poll).
	Min time.Duration
	// Max is the most time between two listings (default 5 minutes): how late a new Juice job may be seen at worst
	// (the prolog registers a job the poller has not seen, so a late one loses only its session made ahead), and how
	// late a hold of a pending job is seen (its state stays PENDING). A listing of 2,000 jobs took 2 s of
	// slurmrestd on 26.05 (test/results/bench-scale.md): with 100,000 queued jobs Factor alone would wait over 15
	// minutes, and 5 minutes keeps the cost near a quarter of slurmrestd's time.
	Max time.Duration
}

// DefaultListPace is the pace of a zero ListPace.
var DefaultListPace = ListPace{Factor: 10, Min: 0, Max: 5 * time.Minute}

// after is how long after a listing that took wall the next one is due.
func (l ListPace) after(wall time.Duration) time.Duration {
	if l.Factor <= 0 {
		l.Factor = DefaultListPace.Factor
	}
	if l.Max <= 0 {
		l.Max = DefaultListPace.Max
	}
	d := time.Duration(l.Factor * float64(wall))
	return min(max(d, l.Min), max(l.Max, l.Min))
}

// Poller observes Slurm and records what it sees and wants in the reservations' specs; it never moves a
// reservation and never acts on Slurm. A poll costs slurmctld either one conditional listing of the queue
// (update_time: "nothing changed" is cheap, any change returns every job), or, between listings paced by what they
// cost (ListPace) and when the API has it (v0.0.40+), the states of the open reservations' jobs only (JobStates,
// one light RPC per 400 jobs, paced the same way when there are more) and one GET for each of those whose state
// changed, and, paced the same way, a discovery of the jobs submitted since (every job's state, then one GET per
// new job id). A single GET also confirms that a job missing from the listing is really gone. From what it knows of the Juice jobs it
//
//   - creates a pending reservation for each Juice job that wants one now: CONFIGURING, RUNNING or SUSPENDED, or
//     PENDING and picked by the look-ahead policy (the store decides whether the run may be reserved);
//   - marks not wanted each open reservation whose run ended, was cancelled, was requeued (a new run replaces
//     it), is held, or vanished from slurmctld;
//   - records the job's state and pending reason, for the job actor and for people.
type Poller struct {
	Slurm     Slurm
	Store     *store.Store
	Cluster   string
	Lookahead reconcile.Lookahead
	// TrustComment also reads requests from the job's comment, which its owner can change; by default only
	// admin_comment, which job_submit.lua writes and the owner cannot change, is trusted.
	TrustComment bool
	Log          logr.Logger
	Metrics      *Metrics
	// Enqueue hands a reservation the poller created to the reconciler at once.
	Enqueue func(uuid.UUID)
	Now     func() time.Time
	// Pace paces the listings while known runs are tracked by their states; the zero value is DefaultListPace.
	Pace ListPace
	// DiscoverPace paces the discovery of new jobs between listings: every job's state (AllJobStates, a small
	// record each), and one GET for each job id not seen before. The zero value is DefaultListPace: the rule is
	// the same, and since the states cost far less than a listing, discoveries come far more often.
	DiscoverPace ListPace
	// TrackPace paces the tracking of the known runs' states the same way (the zero value is DefaultListPace with
	// Max 1 minute) once they need more than one request (slurmrest.StatesBatch): fewer are tracked at every poll;
	// 100,000 of them are 250 requests, which slurmrestd and slurmctld would otherwise serve every poll. The pace
	// only puts off seeing a run end or vanish without its epilog (the epilog reports its job's end at once) and a
	// pending job cancelled.
	TrackPace ListPace
	// FullListings lists the queue at every poll and never tracks states: the design before issue 14, kept to
	// compare with (test/bench/cmd/juice-bench-scale) and as a way out.
	FullListings bool

	since    time.Time
	snapshot map[uint32]slurmrest.Job // the Juice jobs of the last listing that changed
	quiet    int                      // polls in a row that found Slurm unchanged and skipped the comparison
	// unsettled is set while a comparison has not run to its end: a poll that failed half-way is compared again
	// at the next one, even when Slurm reports no change since.
	unsettled bool
	kicked    atomic.Bool // a reservation was created: compare at the next poll even if Slurm did not change

	track    trackMode
	nextList time.Time         // the next listing is due then (tracking only)
	known    []reconcile.RunID // the open reservations' bound runs, as of the last comparison: what is tracked
	// seen holds every job id of the last listing or discovery, Juice job or not: an id not in it is new.
	seen         map[uint32]bool
	nextDiscover time.Time
	discoverWall time.Duration // the last discovery's AllJobStates took so long
	nextTrack    time.Time
}

// defaultTrackPace is the pace of a zero TrackPace.
var defaultTrackPace = ListPace{Factor: DefaultListPace.Factor, Max: time.Minute}

type trackMode int

const (
	trackUnknown trackMode = iota // not asked yet
	trackYes
	trackNo // the API has no jobs/state (22.05), or FullListings
)

// tracking reports whether known runs are tracked by their states (asked once of the client).
func (p *Poller) tracking(ctx context.Context) (bool, error) {
	if p.FullListings {
		return false, nil
	}
	if p.track == trackUnknown {
		can, err := p.Slurm.CanTrackStates(ctx)
		if err != nil {
			return false, fmt.Errorf("poll slurmrestd: %w", err)
		}
		p.track = trackNo
		if can {
			p.track = trackYes
		}
		p.Log.Info("known runs tracked by their states between listings", "tracked", can)
	}
	return p.track == trackYes, nil
}

// Kick makes the next poll compare Slurm with the reservations even if Slurm reports no change.
func (p *Poller) Kick() { p.kicked.Store(true) }

// quietPolls is how many unchanged listings in a row may skip the comparison with the reservations.
const quietPolls = 14

// Poll observes once.
func (p *Poller) Poll(ctx context.Context) error {
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	tracking, err := p.tracking(ctx)
	if err != nil {
		return err
	}
	var unchanged bool
	if !tracking || p.snapshot == nil || !now.Before(p.nextList) {
		if unchanged, err = p.list(ctx, now); err != nil {
			return err
		}
	} else {
		var changed bool
		if !now.Before(p.nextTrack) {
			if changed, err = p.trackKnown(ctx, now); err != nil {
				return err
			}
		}
		if !now.Before(p.nextDiscover) {
			found, err := p.discover(ctx, now)
			if err != nil {
				return err
			}
			changed = changed || found
		}
		unchanged = !changed
	}
	// Nothing changed in Slurm: the comparison below would find what the last one found, so it is skipped, but
	// not for ever: the look-ahead window moves with time, and a purged job may not touch the listing.
	if unchanged && !p.unsettled && p.quiet < quietPolls && !p.kicked.Swap(false) {
		p.quiet++
		return nil
	}
	p.quiet = 0
	p.unsettled = true

	open, err := p.Store.Tracked(ctx)
	if err != nil {
		return err
	}
	if err := p.bind(ctx, open); err != nil {
		return err
	}
	have := make(map[reconcile.RunID]bool, len(open))
	ready := make(map[reconcile.RunID]bool, len(open))
	for _, r := range open {
		have[r.Run] = true
		ready[r.Run] = r.State == reconcile.StateReady
	}
	jobs := make([]uint32, 0, len(p.snapshot))
	for id := range p.snapshot {
		jobs = append(jobs, id)
	}
	done, err := p.Store.Done(ctx, jobs)
	if err != nil {
		return err
	}

	// What is wanted: the active Juice jobs, and the pending ones the look-ahead picks among those that may still
	// be served (a run whose reservation failed or that is over does not take a place in the look-ahead).
	var cands []reconcile.Candidate
	want := map[reconcile.RunID]bool{}
	for _, j := range p.snapshot {
		if j.Remainder() {
			// An array's pending remainder is not a run: its next pending elements are, each a candidate.
			if j.State != slurmrest.StatePending || j.Held() {
				continue
			}
			tasks, err := j.Array.PendingTasks(p.Lookahead.ArrayCandidates())
			if err != nil {
				p.Log.Info("cannot read an array's pending elements; none reserved ahead", "job", j.ID, "error", err.Error())
				continue
			}
			for _, t := range tasks {
				if run := p.element(&j, t); !done[run] {
					cands = append(cands, p.candidate(&j, run))
				}
			}
			continue
		}
		run := p.run(&j)
		if done[run] {
			continue
		}
		switch j.State {
		case slurmrest.StatePending:
			if !j.Held() {
				cands = append(cands, p.candidate(&j, run))
			}
		case slurmrest.StateConfiguring, slurmrest.StateRunning, slurmrest.StateSuspended:
			want[run] = true
			if !ready[run] {
				c := p.candidate(&j, run)
				c.Started = true
				cands = append(cands, c)
			}
		}
	}
	for run := range p.Lookahead.Select(now, cands) {
		want[run] = true
	}
	var news []reconcile.NewReservation
	for run := range want {
		if have[run] {
			continue
		}
		j := p.snapshot[run.JobID]
		what := fmt.Sprintf("job %d", j.ID)
		if run.Unbound() {
			j = p.snapshot[run.ArrayJobID]
			what = fmt.Sprintf("array element %d_%d", run.ArrayJobID, run.ArrayTaskID)
		}
		req, _ := JobRequest(&j, p.TrustComment)
		news = append(news, reconcile.NewReservation{Run: run, Request: req, UserName: j.UserName, Account: j.Account, Partition: j.Partition,
			JobState: string(j.State), Reason: fmt.Sprintf("%s %s: reserving %s", what, j.State, req.Describe())})
	}
	created, err := p.Store.Ensure(ctx, news)
	if err != nil {
		return err
	}
	for _, r := range created {
		p.Log.Info("new reservation", "job", r.Run.JobID, "run", r.Run.Run, "request", r.Request.String(), "jobState", r.Spec.JobState)
		p.Enqueue(r.ID)
	}
	known := make([]reconcile.RunID, 0, len(open)+len(created))
	for i := range open {
		if err := p.observe(ctx, &open[i]); err != nil {
			return err
		}
		if !open[i].Run.Unbound() {
			known = append(known, open[i].Run)
		}
	}
	for _, r := range created {
		if !r.Run.Unbound() {
			known = append(known, r.Run)
		}
	}
	p.known = known
	p.unsettled = false
	return nil
}

// list takes a listing of the queue into the snapshot; unchanged is true when Slurm reports no change since the last
// one. While tracking, the next listing is due ListPace.after the listing's wall time.
func (p *Poller) list(ctx context.Context, now time.Time) (unchanged bool, err error) {
	start := time.Now()
	list, err := p.Slurm.ListJobs(ctx, p.since)
	p.Metrics.ObserveSlurm("list_jobs", err)
	if err != nil {
		return false, fmt.Errorf("poll slurmrestd: %w", err)
	}
	// Due after the listing's end: a listing longer than Max must not be followed at once by the next one.
	wall := time.Since(start)
	p.nextList = now.Add(wall + p.Pace.after(wall))
	if list.Unchanged && p.snapshot != nil {
		return true, nil
	}
	snapshot := map[uint32]slurmrest.Job{}
	seen := make(map[uint32]bool, len(list.Jobs))
	for _, j := range list.Jobs {
		seen[j.ID] = true
		_, err := JobRequest(&j, p.TrustComment)
		switch {
		case err == nil:
			snapshot[j.ID] = j
		case !errors.Is(err, request.ErrNotARequest):
			p.Log.V(1).Info("job carries a malformed Juice request; ignored", "job", j.ID, "error", err.Error())
		}
	}
	p.snapshot, p.since, p.seen = snapshot, list.LastUpdate, seen
	// The listing knows every job: the next discovery is paced from its end, by the last discovery's cost.
	p.nextDiscover = now.Add(wall + p.DiscoverPace.after(p.discoverWall))
	return false, nil
}

// discover finds the Juice jobs submitted since the last listing or discovery without listing the queue: every
// job's state (a small record each), and one GET for each id not seen before that is still pending or running.
// An array's elements are left to the listings. found is true when a new Juice job joined the snapshot.
func (p *Poller) discover(ctx context.Context, now time.Time) (found bool, err error) {
	start := time.Now()
	states, err := p.Slurm.AllJobStates(ctx)
	p.Metrics.ObserveSlurm("all_job_states", err)
	if err != nil {
		return false, fmt.Errorf("poll slurmrestd for every job's state: %w", err)
	}
	wall := time.Since(start)
	p.discoverWall = wall
	p.nextDiscover = now.Add(wall + p.DiscoverPace.after(wall))
	seen := make(map[uint32]bool, len(states))
	for _, st := range states {
		seen[st.ID] = true
		if st.HasTask || p.seen[st.ID] || st.State.IsFinished() {
			continue
		}
		j, err := p.Slurm.GetJob(ctx, st.ID)
		p.Metrics.ObserveSlurm("get_job", err)
		switch {
		case errors.Is(err, slurmrest.ErrNotFound):
			continue
		case err != nil:
			return false, fmt.Errorf("read new job %d: %w", st.ID, err)
		}
		if _, err := JobRequest(j, p.TrustComment); err == nil && !j.Remainder() {
			p.snapshot[j.ID] = *j
			found = true
		}
	}
	p.seen = seen
	return found, nil
}

// trackKnown updates the snapshot's entries of the known runs' jobs from their states: a job whose state differs
// from the snapshot's is read in full (one GET: its run, reason and hold are not in the state reply), and one
// slurmctld no longer knows leaves the snapshot (observe confirms with one GET that it is gone). A job that was
// held while pending keeps its state: the next listing shows the hold. changed is true when an entry changed.
func (p *Poller) trackKnown(ctx context.Context, now time.Time) (changed bool, err error) {
	if len(p.known) == 0 {
		return false, nil
	}
	ids := make([]uint32, len(p.known))
	for i, r := range p.known {
		ids[i] = r.JobID
	}
	start := time.Now()
	states, err := p.Slurm.JobStates(ctx, ids)
	p.Metrics.ObserveSlurm("job_states", err)
	if err != nil {
		return false, fmt.Errorf("poll slurmrestd for the states of %d jobs: %w", len(ids), err)
	}
	// States that fit in one request are asked at every poll, as before the pace: array elements reserved ahead
	// need the end of the elements before them seen at once (an e2e test missed two of them on a loaded machine).
	// The pace is for tens of thousands.
	p.nextTrack = time.Time{}
	if len(ids) > slurmrest.StatesBatch {
		pace := p.TrackPace
		if pace == (ListPace{}) {
			pace = defaultTrackPace
		}
		wall := time.Since(start)
		p.nextTrack = now.Add(wall + pace.after(wall))
	}
	type key struct {
		id, task uint32
		hasTask  bool
	}
	seen := make(map[key]slurmrest.JobState, len(states))
	for _, st := range states {
		seen[key{st.ID, st.Task, st.HasTask}] = st.State
	}
	for _, r := range p.known {
		state, ok := seen[key{id: r.JobID}]
		if r.Element() {
			// An element is named by its own job id (v0.0.42+) or by its array's (v0.0.40/41), with its task id.
			if state, ok = seen[key{r.JobID, r.ArrayTaskID, true}]; !ok {
				state, ok = seen[key{r.ArrayJobID, r.ArrayTaskID, true}]
			}
		}
		old, had := p.snapshot[r.JobID]
		switch {
		case !ok && !had:
			// Gone, or a job the listing never showed as a Juice job: observe asks slurmrestd as it did before.
		case !ok:
			delete(p.snapshot, r.JobID)
			changed = true
		case had && old.State == state:
		default:
			j, err := p.Slurm.GetJob(ctx, r.JobID)
			p.Metrics.ObserveSlurm("get_job", err)
			switch {
			case errors.Is(err, slurmrest.ErrNotFound):
				delete(p.snapshot, r.JobID)
			case err != nil:
				return false, fmt.Errorf("read job %d, whose state changed to %s: %w", r.JobID, state, err)
			default:
				if _, err := JobRequest(j, p.TrustComment); err == nil {
					p.snapshot[r.JobID] = *j
				} else {
					delete(p.snapshot, r.JobID)
				}
			}
			changed = true
		}
	}
	return changed, nil
}

// bind binds each open reservation of an array element reserved ahead to the job id slurmctld gave the element,
// once the listing shows the element as a job of its own.
func (p *Poller) bind(ctx context.Context, open []reconcile.Tracked) error {
	type element struct{ array, task uint32 }
	var split map[element]uint32
	for i := range open {
		r := &open[i]
		if !r.Run.Unbound() {
			continue
		}
		if split == nil {
			split = map[element]uint32{}
			for _, j := range p.snapshot {
				if j.Array != nil && j.Array.HasTask {
					split[element{j.Array.JobID, j.Array.TaskID}] = j.ID
				}
			}
		}
		job, ok := split[element{r.Run.ArrayJobID, r.Run.ArrayTaskID}]
		if !ok || p.snapshot[job].Run != r.Run.Run {
			continue
		}
		if _, err := p.Store.Bind(ctx, r.Run.Bound(job)); err != nil {
			return err
		}
		p.Log.Info("array element bound to its job", "job", job, "run", r.Run.Run, "array", r.Run.ArrayJobID, "task", r.Run.ArrayTaskID)
		r.Run = r.Run.Bound(job)
		p.Enqueue(r.ID)
	}
	return nil
}

// observeElement records what Slurm says of an array element reserved ahead, still in its array's remainder.
func (p *Poller) observeElement(ctx context.Context, r *reconcile.Tracked) error {
	j, ok := p.snapshot[r.Run.ArrayJobID]
	pending, known := false, true
	if ok {
		pending, known = j.Array.StillPending(r.Run.ArrayTaskID)
	}
	switch {
	case !known:
		return nil // slurmctld's text of the pending elements was cut short before this one
	case !pending:
		// Not pending in the remainder, and not a job of its own (bind found none): cancelled while pending.
		return p.unwant(ctx, r, "GONE", fmt.Sprintf("array element %d_%d is no longer pending", r.Run.ArrayJobID, r.Run.ArrayTaskID), true)
	case j.Held():
		return p.unwant(ctx, r, string(j.State), fmt.Sprintf("array %d is held (%s)", j.ID, j.StateReason), false)
	}
	return p.record(ctx, r, string(j.State), j.StateReason)
}

// observe records what Slurm says of one open reservation's job.
func (p *Poller) observe(ctx context.Context, r *reconcile.Tracked) error {
	if r.Run.Unbound() {
		return p.observeElement(ctx, r)
	}
	j, ok := p.snapshot[r.Run.JobID]
	if !ok {
		// Missing from a good listing: the job aged out of slurmctld after it ended, or its request is gone.
		// One GET tells which.
		got, err := p.Slurm.GetJob(ctx, r.Run.JobID)
		p.Metrics.ObserveSlurm("get_job", err)
		switch {
		case errors.Is(err, slurmrest.ErrNotFound):
			return p.unwant(ctx, r, "GONE", fmt.Sprintf("job %d is gone from slurmctld", r.Run.JobID), true)
		case err != nil:
			return fmt.Errorf("confirm job %d: %w", r.Run.JobID, err)
		}
		// Found: a listing older than the prolog that registered the run, or a job whose admin_comment no longer
		// carries the request. Either way it lives.
		j = *got
	}
	state := string(j.State)
	switch {
	case j.Run > r.Run.Run:
		return p.unwant(ctx, r, state, fmt.Sprintf("job %d was requeued: run %d replaces run %d", j.ID, j.Run, r.Run.Run), true)
	case j.Run < r.Run.Run:
		return nil // a listing older than the prolog that registered this run
	case j.State.IsFinished() || j.State == slurmrest.StateCompleting:
		return p.unwant(ctx, r, state, fmt.Sprintf("job %d ended: %s", j.ID, j.State), true)
	case j.Held():
		// Held: the GPUs go back to the pool, and the run is reserved again once the job is let go.
		return p.unwant(ctx, r, state, fmt.Sprintf("job %d is held (%s)", j.ID, j.StateReason), false)
	}
	return p.record(ctx, r, state, j.StateReason)
}

// record writes the job's state and reason into the spec when they changed.
func (p *Poller) record(ctx context.Context, r *reconcile.Tracked, state, reason string) error {
	if r.JobState == state && r.JobReason == reason {
		return nil
	}
	return p.Store.ObserveJob(ctx, r.ID, state, reason)
}

// unwant records that the run no longer wants its session; the reconciler releases it.
func (p *Poller) unwant(ctx context.Context, r *reconcile.Tracked, state, why string, over bool) error {
	if err := p.record(ctx, r, state, ""); err != nil {
		return err
	}
	changed, err := p.Store.Unwant(ctx, r.ID, why, over)
	if changed {
		p.Enqueue(r.ID)
	}
	return err
}

func (p *Poller) run(j *slurmrest.Job) reconcile.RunID {
	run := reconcile.RunID{Cluster: p.Cluster, JobID: j.ID, Run: j.Run}
	if j.Array != nil && j.Array.HasTask {
		run.ArrayJobID, run.ArrayTaskID = j.Array.JobID, j.Array.TaskID
	}
	return run
}

// element is the run of task of the array whose remainder is j: not started, so without a job id of its own.
func (p *Poller) element(j *slurmrest.Job, task uint32) reconcile.RunID {
	return reconcile.RunID{Cluster: p.Cluster, Run: 0, ArrayJobID: j.Array.JobID, ArrayTaskID: task}
}

func (p *Poller) candidate(j *slurmrest.Job, run reconcile.RunID) reconcile.Candidate {
	req, _ := JobRequest(j, p.TrustComment)
	return reconcile.Candidate{Run: run, Request: req, User: j.UserName, Account: j.Account, Priority: j.Priority,
		SubmitTime: j.SubmitTime, StateReason: j.StateReason, ExpectedStart: j.StartTime, BeginTime: j.EligibleTime}
}

// JobRequest is the Juice request a job carries, if it carries one that is trusted: its admin_comment, which only
// job_submit.lua writes, or with trustComment (not the default) its comment, which its owner can change. A job
// without a request gives request.ErrNotARequest.
func JobRequest(j *slurmrest.Job, trustComment bool) (request.Request, error) {
	src := j.AdminComment
	if src == "" && trustComment {
		src = j.Comment
	}
	return request.Parse(src)
}
