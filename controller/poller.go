package controller

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/plan"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
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

// PollerStore is what the poller asks of the store (*store.Store): the reservations of the runs it compares with
// Slurm, and the writes of a plan. Observers' writes only: none of them moves a reservation.
type PollerStore interface {
	// Tracked returns the open reservations, oldest first.
	Tracked(ctx context.Context) ([]reconcile.Tracked, error)
	// Ended returns the final reservations of the given jobs' runs and of their arrays' elements.
	Ended(ctx context.Context, jobIDs []uint32) ([]reconcile.Tracked, error)
	Bind(ctx context.Context, run reconcile.RunID) (int64, error)
	Ensure(ctx context.Context, nrs []reconcile.NewReservation) ([]reconcile.Reservation, error)
	ObserveJob(ctx context.Context, id uuid.UUID, jobState, jobReason string) error
	ObserveTimes(ctx context.Context, id uuid.UUID, start, end time.Time) error
	Unwant(ctx context.Context, id uuid.UUID, reason string, over bool) (bool, error)
}

// Poller observes Slurm and records what it sees and wants in the reservations' specs; it never moves a
// reservation and never acts on Slurm. Each poll refreshes its Slurm cache (slurmCache: listings, tracking and
// discovery, each paced by what it costs) and, when something changed, reads the reservations, asks plan.Plan
// what to change and applies that through the store:
//
//   - creates a pending reservation for each Juice job that wants one now and may have one
//     (reconcile.Reservable): CONFIGURING, RUNNING or SUSPENDED, or PENDING and picked by the look-ahead;
//   - marks not wanted each open reservation whose run ended, was cancelled, was requeued (a new run replaces
//     it), is held, or vanished from slurmctld;
//   - records the job's state and pending reason, for the job actor and for people, and when Slurm started and
//     ended each run (for juice-slurm report: what Slurm charged the pool's license).
type Poller struct {
	Slurm     Slurm
	Store     PollerStore
	Cluster   string
	Lookahead reconcile.Lookahead
	// Handoff reports whether a pool's sessions pass from run to run (the site policy's Policy.Handoff): a pending
	// job alike to a running one there is not reserved ahead (reconcile.Candidate.Heir). Nil: no pool has it.
	Handoff func(pool string) bool
	// TrustComment also reads requests from the job's comment, which its owner can change; by default only
	// admin_comment, which job_submit.lua writes and the owner cannot change, is trusted.
	TrustComment bool
	Log          logr.Logger
	Metrics      *Metrics
	// Enqueue hands a reservation the poller created to the reconciler at once.
	Enqueue func(uuid.UUID)
	Now     func() time.Time
	// Pace paces the listings while known runs are tracked by their states; the zero value is DefaultListPace.
	// It, DiscoverPace, TrackPace, TrustComment, Slurm, Log and Metrics are read at the first poll.
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

	cache *slurmCache
	quiet int // polls in a row that found Slurm unchanged and skipped the comparison
	// unsettled is set while a comparison has not run to its end: a poll that failed half-way is compared again
	// at the next one, even when Slurm reports no change since.
	unsettled bool
	kicked    atomic.Bool // a reservation was created: compare at the next poll even if Slurm did not change
	// followers are the likenesses of the Juice jobs the last comparison saw pending that may start as soon as a
	// like run ends (reconcile.Follows): what an ended run's session waits for, with hand-off on (Followers).
	followers atomic.Pointer[map[reconcile.Likeness]bool]
}

// Followers reports whether the last comparison saw a Juice job alike to l pending that may start as soon as a like
// run ends (reconcile.Handoff.Followers). Safe to call from any goroutine.
func (p *Poller) Followers(l reconcile.Likeness) bool {
	m := p.followers.Load()
	return m != nil && (*m)[l]
}

// noteFollowers keeps the likenesses of the snapshot's pending jobs that may follow a like run (an array's pending
// remainder is one job).
func (p *Poller) noteFollowers(snap plan.Snapshot) {
	m := map[reconcile.Likeness]bool{}
	for _, j := range snap.Jobs {
		if j.UserName != "" && reconcile.Follows(string(j.State), j.StateReason) {
			m[j.Likeness()] = true
		}
	}
	p.followers.Store(&m)
}

// Kick makes the next poll compare Slurm with the reservations even if Slurm reports no change.
func (p *Poller) Kick() { p.kicked.Store(true) }

// quietPolls is how many unchanged listings in a row may skip the comparison with the reservations.
const quietPolls = 14

// Poll observes once: refresh the Slurm cache, plan from its snapshot and the reservations, apply the plan.
func (p *Poller) Poll(ctx context.Context) error {
	if p.cache == nil {
		p.cache = &slurmCache{slurm: p.Slurm, metrics: p.Metrics, log: p.Log, trustComment: p.TrustComment,
			pace: p.Pace, discoverPace: p.DiscoverPace, trackPace: p.TrackPace}
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	changed, err := p.cache.refresh(ctx, now)
	if err != nil {
		return err
	}
	// Nothing changed in Slurm: the plan would be the last one, so it is skipped, but not for ever: the
	// look-ahead window moves with time, and a purged job may not touch the listing.
	if !changed && !p.unsettled && p.quiet < quietPolls && !p.kicked.Swap(false) {
		p.quiet++
		return nil
	}
	p.quiet, p.unsettled = 0, true
	var runs plan.Runs
	if runs.Open, err = p.Store.Tracked(ctx); err != nil {
		return err
	}
	snap, err := p.cache.snapshot(ctx, p.Cluster, now, runs.Open)
	if err != nil {
		return err
	}
	p.noteFollowers(snap)
	if runs.Ended, err = p.Store.Ended(ctx, snap.JobIDs()); err != nil {
		return err
	}
	if err := p.apply(ctx, plan.Plan(snap, runs, p.Lookahead, p.Handoff)); err != nil {
		return err
	}
	p.unsettled = false
	return nil
}

// apply writes a plan through the store, in its order, hands every reservation it changed to the reconciler, and
// gives the cache the runs to track.
func (p *Poller) apply(ctx context.Context, ch plan.Changes) error {
	for _, err := range ch.Unread {
		p.Log.Info("part of the snapshot cannot be read; left out", "error", err.Error())
	}
	for _, b := range ch.Bind {
		if _, err := p.Store.Bind(ctx, b.Run); err != nil {
			return err
		}
		p.Log.Info("array element bound to its job", "job", b.Run.JobID, "run", b.Run.Run, "array", b.Run.ArrayJobID, "task", b.Run.ArrayTaskID)
		p.Enqueue(b.ID)
	}
	created, err := p.Store.Ensure(ctx, ch.Create)
	if err != nil {
		return err
	}
	for _, r := range created {
		p.Log.Info("new reservation", "job", r.Run.JobID, "run", r.Run.Run, "request", r.Request.String(), "jobState", r.Spec.JobState)
		p.Enqueue(r.ID)
	}
	for _, o := range ch.Observe {
		if o.Record {
			if err := p.Store.ObserveJob(ctx, o.ID, o.JobState, o.JobReason); err != nil {
				return err
			}
		}
		if o.Unwant {
			// The reconciler releases it.
			changed, err := p.Store.Unwant(ctx, o.ID, o.Why, o.Over)
			if changed {
				p.Enqueue(o.ID)
			}
			if err != nil {
				return err
			}
		}
	}
	for _, t := range ch.Times {
		if err := p.Store.ObserveTimes(ctx, t.ID, t.Start, t.End); err != nil {
			return err
		}
	}
	known := ch.Track
	for _, r := range created {
		if !r.Run.Unbound() {
			known = append(known, r.Run)
		}
	}
	p.cache.known = known
	return nil
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
