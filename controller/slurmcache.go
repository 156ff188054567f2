package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/plan"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// slurmCache is the poller's view of slurmctld: it lists, tracks and discovers the Juice jobs, each paced by what
// it costs, and keeps what it saw, which it hands out as a plan.Snapshot. It decides nothing about reservations.
//
// A refresh costs slurmctld either one conditional listing of the queue (update_time: "nothing changed" is cheap,
// any change returns every job), or, between listings paced by what they cost (ListPace) and when the API has it
// (v0.0.40+), the states of the known runs' jobs only (JobStates, one light RPC per 400 jobs, paced the same way
// when there are more) and one GET for each of those whose state changed, and, paced the same way, a discovery
// of the jobs submitted since (every job's state, then one GET per new job id). A snapshot also confirms with one
// GET each job of an open run that is missing from the listing.
type slurmCache struct {
	slurm        Slurm
	metrics      *Metrics
	log          logr.Logger
	trustComment bool
	pace         ListPace
	discoverPace ListPace
	trackPace    ListPace

	since time.Time
	jobs  map[uint32]plan.Job // the Juice jobs of the last listing that changed, as tracked and discovered since
	track trackMode
	// nextList: the next listing is due then (tracking only).
	nextList time.Time
	known    []reconcile.RunID // the open reservations' bound runs, as of the last plan: what is tracked
	// seen holds every job id of the last listing or discovery, Juice job or not: an id not in it is new.
	seen         map[uint32]bool
	nextDiscover time.Time
	discoverWall time.Duration // the last discovery's AllJobStates took so long
	nextTrack    time.Time
}

// refresh brings the cache up to date as far as the paces allow; changed is false when Slurm reported no change.
func (c *slurmCache) refresh(ctx context.Context, now time.Time) (changed bool, err error) {
	tracking, err := c.tracking(ctx)
	if err != nil {
		return false, err
	}
	if !tracking || c.jobs == nil || !now.Before(c.nextList) {
		unchanged, err := c.list(ctx, now)
		return !unchanged, err
	}
	if !now.Before(c.nextTrack) {
		if changed, err = c.trackKnown(ctx, now); err != nil {
			return false, err
		}
	}
	if !now.Before(c.nextDiscover) {
		found, err := c.discover(ctx, now)
		if err != nil {
			return false, err
		}
		changed = changed || found
	}
	return changed, nil
}

// snapshot is what the cache knows at now, with the jobs of the open runs missing from it read one by one
// (plan.Missing): a job slurmctld no longer knows is confirmed gone by a GET, never judged by its absence alone.
func (c *slurmCache) snapshot(ctx context.Context, cluster string, now time.Time, open []reconcile.Tracked) (plan.Snapshot, error) {
	read := map[uint32]*slurmrest.Job{}
	for _, id := range plan.Missing(c.jobs, open) {
		got, err := c.slurm.GetJob(ctx, id)
		c.metrics.ObserveSlurm("get_job", err)
		switch {
		case errors.Is(err, slurmrest.ErrNotFound):
			read[id] = nil
		case err != nil:
			return plan.Snapshot{}, fmt.Errorf("confirm job %d: %w", id, err)
		default:
			read[id] = got
		}
	}
	return plan.Snapshot{Cluster: cluster, At: now, Jobs: c.jobs, Read: read}, nil
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

// defaultTrackPace is the pace of a zero TrackPace.
var defaultTrackPace = ListPace{Factor: DefaultListPace.Factor, Max: time.Minute}

type trackMode int

const (
	trackUnknown trackMode = iota // not asked yet
	trackYes
	trackNo // the API has no jobs/state (22.05)
)

// tracking reports whether known runs are tracked by their states (asked once of the client).
func (c *slurmCache) tracking(ctx context.Context) (bool, error) {
	if c.track == trackUnknown {
		can, err := c.slurm.CanTrackStates(ctx)
		if err != nil {
			return false, fmt.Errorf("poll slurmrestd: %w", err)
		}
		c.track = trackNo
		if can {
			c.track = trackYes
		}
		c.log.Info("known runs tracked by their states between listings", "tracked", can)
	}
	return c.track == trackYes, nil
}

// list takes a listing of the queue into the snapshot; unchanged is true when Slurm reports no change since the last
// one. While tracking, the next listing is due ListPace.after the listing's wall time.
func (c *slurmCache) list(ctx context.Context, now time.Time) (unchanged bool, err error) {
	start := time.Now()
	list, err := c.slurm.ListJobs(ctx, c.since)
	c.metrics.ObserveSlurm("list_jobs", err)
	if err != nil {
		return false, fmt.Errorf("poll slurmrestd: %w", err)
	}
	// Due after the listing's end: a listing longer than Max must not be followed at once by the next one.
	wall := time.Since(start)
	c.nextList = now.Add(wall + c.pace.after(wall))
	if list.Unchanged && c.jobs != nil {
		return true, nil
	}
	jobs := map[uint32]plan.Job{}
	seen := make(map[uint32]bool, len(list.Jobs))
	for _, j := range list.Jobs {
		seen[j.ID] = true
		req, err := JobRequest(&j, c.trustComment)
		switch {
		case err == nil:
			jobs[j.ID] = plan.Job{Job: j, Request: req}
		case !errors.Is(err, request.ErrNotARequest):
			c.log.V(1).Info("job carries a malformed Juice request; ignored", "job", j.ID, "error", err.Error())
		}
	}
	c.jobs, c.since, c.seen = jobs, list.LastUpdate, seen
	// The listing knows every job: the next discovery is paced from its end, by the last discovery's cost.
	c.nextDiscover = now.Add(wall + c.discoverPace.after(c.discoverWall))
	return false, nil
}

// discover finds the Juice jobs submitted since the last listing or discovery without listing the queue: every
// job's state (a small record each), and one GET for each id not seen before that is still pending or running.
// An array's elements are left to the listings. found is true when a new Juice job joined the snapshot.
func (c *slurmCache) discover(ctx context.Context, now time.Time) (found bool, err error) {
	start := time.Now()
	states, err := c.slurm.AllJobStates(ctx)
	c.metrics.ObserveSlurm("all_job_states", err)
	if err != nil {
		return false, fmt.Errorf("poll slurmrestd for every job's state: %w", err)
	}
	wall := time.Since(start)
	c.discoverWall = wall
	c.nextDiscover = now.Add(wall + c.discoverPace.after(wall))
	seen := make(map[uint32]bool, len(states))
	for _, st := range states {
		seen[st.ID] = true
		if st.HasTask || c.seen[st.ID] || st.State.IsFinished() {
			continue
		}
		j, err := c.slurm.GetJob(ctx, st.ID)
		c.metrics.ObserveSlurm("get_job", err)
		switch {
		case errors.Is(err, slurmrest.ErrNotFound):
			continue
		case err != nil:
			return false, fmt.Errorf("read new job %d: %w", st.ID, err)
		}
		if req, err := JobRequest(j, c.trustComment); err == nil && !j.Remainder() {
			c.jobs[j.ID] = plan.Job{Job: *j, Request: req}
			found = true
		}
	}
	c.seen = seen
	return found, nil
}

// trackKnown updates the snapshot's entries of the known runs' jobs from their states: a job whose state differs
// from the snapshot's is read in full (one GET: its run, reason and hold are not in the state reply), and one
// slurmctld no longer knows leaves the snapshot (snapshot confirms with one GET that it is gone). A job that was
// held while pending keeps its state: the next listing shows the hold. changed is true when an entry changed.
func (c *slurmCache) trackKnown(ctx context.Context, now time.Time) (changed bool, err error) {
	if len(c.known) == 0 {
		return false, nil
	}
	ids := make([]uint32, len(c.known))
	for i, r := range c.known {
		ids[i] = r.JobID
	}
	start := time.Now()
	states, err := c.slurm.JobStates(ctx, ids)
	c.metrics.ObserveSlurm("job_states", err)
	if err != nil {
		return false, fmt.Errorf("poll slurmrestd for the states of %d jobs: %w", len(ids), err)
	}
	// States that fit in one request are asked at every poll, as before the pace: array elements reserved ahead
	// need the end of the elements before them seen at once (an e2e test missed two of them on a loaded machine).
	// The pace is for tens of thousands.
	c.nextTrack = time.Time{}
	if len(ids) > slurmrest.StatesBatch {
		pace := c.trackPace
		if pace == (ListPace{}) {
			pace = defaultTrackPace
		}
		wall := time.Since(start)
		c.nextTrack = now.Add(wall + pace.after(wall))
	}
	type key struct {
		id, task uint32
		hasTask  bool
	}
	seen := make(map[key]slurmrest.JobState, len(states))
	for _, st := range states {
		seen[key{st.ID, st.Task, st.HasTask}] = st.State
	}
	for _, r := range c.known {
		state, ok := seen[key{id: r.JobID}]
		if r.Element() {
			// An element is named by its own job id (v0.0.42+) or by its array's (v0.0.40/41), with its task id.
			if state, ok = seen[key{r.JobID, r.ArrayTaskID, true}]; !ok {
				state, ok = seen[key{r.ArrayJobID, r.ArrayTaskID, true}]
			}
		}
		old, had := c.jobs[r.JobID]
		switch {
		case !ok && !had:
			// Gone, or a job the listing never showed as a Juice job: snapshot asks slurmrestd.
		case !ok:
			delete(c.jobs, r.JobID)
			changed = true
		case had && old.State == state:
		default:
			j, err := c.slurm.GetJob(ctx, r.JobID)
			c.metrics.ObserveSlurm("get_job", err)
			switch {
			case errors.Is(err, slurmrest.ErrNotFound):
				delete(c.jobs, r.JobID)
			case err != nil:
				return false, fmt.Errorf("read job %d, whose state changed to %s: %w", r.JobID, state, err)
			default:
				if req, err := JobRequest(j, c.trustComment); err == nil {
					c.jobs[r.JobID] = plan.Job{Job: *j, Request: req}
				} else {
					delete(c.jobs, r.JobID)
				}
			}
			changed = true
		}
	}
	return changed, nil
}
