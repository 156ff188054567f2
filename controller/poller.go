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
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Slurm is what the controller asks of slurmrestd. *slurmrest.Client implements it, whatever API version it
// negotiated.
type Slurm interface {
	ListJobs(ctx context.Context, since time.Time) (slurmrest.JobList, error)
	GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error)
	UpdateJob(ctx context.Context, id uint32, u slurmrest.JobUpdate) error
}

// Poller observes Slurm and sets the level the reconciler drives towards. Each poll costs slurmctld one
// conditional listing (update_time: "nothing changed" is cheap); a single GET is sent only to confirm that a
// job missing from the listing is really gone. From the listing it
//
//   - creates a pending reservation for each Juice job that wants one now: CONFIGURING, RUNNING or SUSPENDED, or
//     PENDING and picked by the look-ahead policy;
//   - marks unwanted each open reservation whose run ended, was cancelled, was requeued (a new run replaces it),
//     is held, or vanished from slurmctld;
//   - lets a requeued run start at once when its session is ready, instead of waiting out Slurm's requeue delay.
type Poller struct {
	Slurm     Slurm
	Store     reconcile.Store
	Cluster   string
	Lookahead reconcile.Lookahead
	// TrustComment also reads requests from the job's comment, which its owner can change; by default only
	// admin_comment, which job_submit.lua writes and the owner cannot change, is trusted.
	TrustComment bool
	Log          logr.Logger
	Metrics      *Metrics
	// Enqueue hands a reservation to the work queue.
	Enqueue func(uuid.UUID)
	Now     func() time.Time

	since    time.Time
	snapshot map[uint32]slurmrest.Job // the Juice jobs of the last listing that changed
	begun    map[reconcile.RunID]bool // runs already let go by BeginNow
	settled  map[reconcile.RunID]bool // wanted runs whose reservation is final (failed): nothing more to create
	quiet    int                      // polls in a row that found Slurm unchanged and skipped the comparison
	kicked   atomic.Bool              // a reservation changed: compare at the next poll even if Slurm did not
}

// Kick makes the next poll compare Slurm with the reservations even if Slurm reports no change: a reservation
// changed (a requeued run's session became ready, say, and the run may begin now).
func (p *Poller) Kick() { p.kicked.Store(true) }

// quietPolls is how many unchanged listings in a row may skip the comparison with the reservations.
const quietPolls = 14

// Poll observes once.
func (p *Poller) Poll(ctx context.Context) error {
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	list, err := p.Slurm.ListJobs(ctx, p.since)
	p.Metrics.observeSlurm("list_jobs", err)
	if err != nil {
		return fmt.Errorf("poll slurmrestd: %w", err)
	}
	// Nothing changed in Slurm: the comparison below would find what the last one found, so it is skipped, but
	// not for ever: the look-ahead window moves with time, and a purged job may not touch the listing.
	if list.Unchanged && p.snapshot != nil && p.quiet < quietPolls && !p.kicked.Swap(false) {
		p.quiet++
		return nil
	}
	p.quiet = 0
	if !list.Unchanged || p.snapshot == nil {
		p.snapshot = map[uint32]slurmrest.Job{}
		for _, j := range list.Jobs {
			if _, ok := p.request(&j); ok {
				p.snapshot[j.ID] = j
			}
		}
		p.since = list.LastUpdate
	}

	var cands []reconcile.Candidate
	var active []slurmrest.Job
	for _, j := range p.snapshot {
		req, _ := p.request(&j)
		switch j.State {
		case slurmrest.StatePending:
			if !j.Held() {
				cands = append(cands, reconcile.Candidate{Run: p.run(&j), Request: req, Priority: j.Priority,
					SubmitTime: j.SubmitTime, StateReason: j.StateReason, ExpectedStart: j.StartTime})
			}
		case slurmrest.StateConfiguring, slurmrest.StateRunning, slurmrest.StateSuspended:
			active = append(active, j)
		}
	}
	want := p.Lookahead.Select(now, cands)
	for _, j := range active {
		want[p.run(&j)] = true
	}
	open, err := p.Store.Open(ctx)
	if err != nil {
		return err
	}
	have := make(map[reconcile.RunID]bool, len(open))
	for _, r := range open {
		have[r.Run] = true
	}
	for run := range want {
		// Only runs without an open reservation cost a write; a run whose reservation failed stays failed
		// (settled) until Slurm starts a new run of the job.
		if have[run] || p.settled[run] {
			continue
		}
		j := p.snapshot[run.JobID]
		req, _ := p.request(&j)
		r, created, err := p.Store.Ensure(ctx, reconcile.NewReservation{Run: run, Request: req, UserName: j.UserName,
			Partition: j.Partition, JobState: string(j.State), Reason: fmt.Sprintf("job %d %s: reserving %s", j.ID, j.State, req.Describe())})
		if err != nil {
			return err
		}
		switch {
		case created:
			p.Log.Info("new reservation", "job", run.JobID, "run", run.Run, "request", req.String(), "jobState", j.State)
			p.Enqueue(r.ID)
		case r.State.Final():
			if p.settled == nil {
				p.settled = map[reconcile.RunID]bool{}
			}
			p.settled[run] = true
		default:
			p.Enqueue(r.ID)
		}
	}
	for i := range open {
		if err := p.observe(ctx, &open[i]); err != nil {
			return err
		}
	}
	p.forget()
	return nil
}

// observe sets one open reservation's wanted level from its job.
func (p *Poller) observe(ctx context.Context, r *reconcile.Reservation) error {
	if r.Run.Cluster != p.Cluster {
		return nil
	}
	j, ok := p.snapshot[r.Run.JobID]
	if !ok {
		// Missing from a good listing: the job aged out of slurmctld after it ended, or its request is gone.
		// One GET tells which.
		got, err := p.Slurm.GetJob(ctx, r.Run.JobID)
		p.Metrics.observeSlurm("get_job", err)
		switch {
		case errors.Is(err, slurmrest.ErrNotFound):
			return p.unwant(ctx, r, fmt.Sprintf("job %d is gone from slurmctld", r.Run.JobID), "GONE", true)
		case err != nil:
			return fmt.Errorf("confirm job %d: %w", r.Run.JobID, err)
		}
		// Found: a listing older than the prolog that registered the run, or a job whose admin_comment does not
		// carry the request (job_submit.lua missing) although its prolog did. Either way it lives.
		j = *got
	}
	switch {
	case j.Run > r.Run.Run:
		return p.unwant(ctx, r, fmt.Sprintf("job %d was requeued: run %d replaces run %d", j.ID, j.Run, r.Run.Run), string(j.State), true)
	case j.Run < r.Run.Run:
		return nil // a listing older than the prolog that registered this run
	case j.State.IsFinished() || j.State == slurmrest.StateCompleting:
		return p.unwant(ctx, r, fmt.Sprintf("job %d ended: %s", j.ID, j.State), string(j.State), true)
	case j.Held():
		// Held: the GPUs go back to the pool, and the run is reserved again once the job is let go.
		return p.unwant(ctx, r, fmt.Sprintf("job %d is held (%s)", j.ID, j.StateReason), string(j.State), false)
	}
	if r.State == reconcile.StateReady && j.State == slurmrest.StatePending && j.StateReason == "BeginTime" && j.Run > 0 && !p.begun[r.Run] {
		// A requeued run waits out Slurm's requeue delay (about two minutes) although its session is ready:
		// let it start now.
		err := p.Slurm.UpdateJob(ctx, j.ID, slurmrest.JobUpdate{BeginNow: true})
		p.Metrics.observeSlurm("update_job", err)
		if err != nil {
			p.Log.Error(err, "cannot let a requeued job begin now", "job", j.ID, "run", j.Run)
		} else {
			if p.begun == nil {
				p.begun = map[reconcile.RunID]bool{}
			}
			p.begun[r.Run] = true
			p.Log.Info("requeued run has its session: letting it begin now", "job", j.ID, "run", j.Run)
		}
	}
	if r.JobState != string(j.State) {
		r.JobState = string(j.State)
		if err := p.Store.Save(ctx, r, nil); err != nil && !errors.Is(err, reconcile.ErrConflict) {
			return err
		}
	}
	return nil
}

// unwant marks a reservation unwanted and moves it to releasing (or released, when nothing was asked yet).
func (p *Poller) unwant(ctx context.Context, r *reconcile.Reservation, reason, jobState string, over bool) error {
	return Unwant(ctx, p.Store, r, reason, jobState, over, p.Enqueue)
}

// request returns the job's Juice request, if it carries one we trust.
func (p *Poller) request(j *slurmrest.Job) (reconcile.Request, bool) {
	src := j.AdminComment
	if src == "" && p.TrustComment {
		src = j.Comment
	}
	r, err := reconcile.ParseRequest(src)
	if err != nil {
		if !errors.Is(err, reconcile.ErrNotARequest) {
			p.Log.V(1).Info("job carries a malformed Juice request; ignored", "job", j.ID, "error", err.Error())
		}
		return reconcile.Request{}, false
	}
	return r, true
}

func (p *Poller) run(j *slurmrest.Job) reconcile.RunID {
	return reconcile.RunID{Cluster: p.Cluster, JobID: j.ID, Run: j.Run}
}

// forget drops what the poller remembers of jobs that slurmctld no longer lists, so its memory follows the
// queue, not the history.
func (p *Poller) forget() {
	for run := range p.settled {
		if _, ok := p.snapshot[run.JobID]; !ok {
			delete(p.settled, run)
		}
	}
	for run := range p.begun {
		if _, ok := p.snapshot[run.JobID]; !ok {
			delete(p.begun, run)
		}
	}
}
