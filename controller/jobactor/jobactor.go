// Package jobactor is the one actor on Slurm's jobs: it carries out reconcile.DecideJob for each reservation the
// leader hands it (a requeued run begins at once when its session is ready, a waiting run's job tells why, a run
// that lost its session is requeued or cancelled), and ends the jobs of runs the leader's sweep finds stranded
// (reconcile.Stranded: Slurm runs them without their session file).
package jobactor

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Store is what the actor reads of the reservations (store.Store).
type Store interface {
	Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error)
}

// Slurm is what the actor asks of slurmrestd (slurmrest.Client).
type Slurm interface {
	GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error)
	UpdateJob(ctx context.Context, id uint32, u slurmrest.JobUpdate) error
}

// Metrics counts the actor's calls of slurmrestd (controller.Metrics).
type Metrics interface {
	ObserveSlurm(op string, err error)
}

// Actor is the one actor on Slurm's jobs: it carries out reconcile.DecideJob for each reservation it is
// handed (when the reconciler moved it, or the poller saw its job change). Asking twice is harmless: Slurm's next
// listing shows the change, and the decision then says to leave the job alone.
type Actor struct {
	Store Store
	Slurm Slurm
	Log   logr.Logger
	// Metrics, when set, counts the calls of slurmrestd.
	Metrics Metrics
	// Ender requeues and cancels jobs whose run lost its session; nil: such jobs are only logged.
	Ender Ender

	// told holds, per reservation, the wait reason this actor wrote into its job's comment, to put the request
	// back once the run stops waiting. It lives as long as the leader's actor: after a change of leader, a job
	// whose run stopped waiting keeps the last reason in its comment (describe tells the truth).
	mu   sync.Mutex
	told map[uuid.UUID]string
}

// Moves says whether a reconciler's move of reservation id into state can give this actor something to do:
// reconcile.DecideJob acts only on pending (a wait to tell), ready (a requeued run to let begin) and failed (a lost
// session) reservations, and a run that stops waiting gets its request back in its comment. The other moves
// (requesting, waiting, releasing, released: two of the three of every run served) cost no pass.
func (a *Actor) Moves(id uuid.UUID, state reconcile.State) bool {
	switch state {
	case reconcile.StatePending, reconcile.StateReady, reconcile.StateFailed:
		return true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, told := a.told[id]
	return told
}

// Ender ends a job's run for the Actor: Requeue a batch job, Cancel an interactive one, and tell the job's user
// why first (Notify: a line on srun's or salloc's terminal).
type Ender interface {
	Requeue(ctx context.Context, job uint32) error
	Cancel(ctx context.Context, job uint32) error
	Notify(ctx context.Context, job uint32, msg string) error
}

// Act decides for one reservation and acts.
func (a *Actor) Act(ctx context.Context, id uuid.UUID) error {
	r, err := a.Store.Get(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if r.Run.JobID == 0 {
		return nil // an array element not started yet: no job of its own to act on
	}
	if err := a.untellWait(ctx, &r); err != nil {
		return err
	}
	switch reconcile.DecideJob(&r) {
	case reconcile.JobTellWait:
		return a.tellWait(ctx, &r)
	case reconcile.JobBeginNow:
		err := a.Slurm.UpdateJob(ctx, r.Run.JobID, slurmrest.JobUpdate{BeginNow: true})
		a.observeSlurm("update_job", err)
		if err != nil {
			return fmt.Errorf("let job %d begin now: %w", r.Run.JobID, err)
		}
		a.Log.Info("requeued run has its session: letting it begin now", "job", r.Run.JobID, "run", r.Run.Run)
	case reconcile.JobLostSession:
		return a.lostSession(ctx, &r)
	}
	return nil
}

func (a *Actor) observeSlurm(op string, err error) {
	if a.Metrics != nil {
		a.Metrics.ObserveSlurm(op, err)
	}
}

// lostSession requeues or cancels a job whose run lost its session, once: only while Slurm still runs that very
// run (after a requeue the job has a new run, and an ended job needs nothing).
func (a *Actor) lostSession(ctx context.Context, r *reconcile.Reservation) error {
	return a.end(ctx, r, "the job's GPUs are gone: "+sanitizeLine(r.Status.FailReason), r.Status.FailReason,
		slurmrest.StateRunning, slurmrest.StateConfiguring, slurmrest.StateSuspended)
}

// strandedReason is what the user and the log are told of a stranded run (reconcile.Stranded).
const strandedReason = "Slurm runs the job although its PrologSlurmctld never wrote its session file (Slurm 26.05 " +
	"does so after slurmctld stopped or was reconfigured during the prolog): no task of it can have its GPUs"

// EndStranded requeues or cancels the job of reservation id, a run the state directory's watch found stranded
// (reconcile.Stranded), as one whose session was lost: only while Slurm still shows that very run RUNNING.
func (a *Actor) EndStranded(ctx context.Context, id uuid.UUID) error {
	r, err := a.Store.Get(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return a.end(ctx, &r, strandedReason, "stranded: no session file while its job runs", slurmrest.StateRunning)
}

// end requeues a batch job or cancels an interactive one, saying why, when Slurm still runs r's very run in one of
// the states (after a requeue the job has a new run, and an ended job needs nothing).
func (a *Actor) end(ctx context.Context, r *reconcile.Reservation, why, logReason string, states ...slurmrest.JobState) error {
	log := a.Log.WithValues("job", r.Run.JobID, "run", r.Run.Run)
	j, err := a.Slurm.GetJob(ctx, r.Run.JobID)
	a.observeSlurm("get_job", err)
	if errors.Is(err, slurmrest.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read job %d to end its run: %w", r.Run.JobID, err)
	}
	if j.Run != r.Run.Run || !slices.Contains(states, j.State) {
		return nil
	}
	if a.Ender == nil {
		log.Info("the run cannot go on but nothing here can requeue or cancel jobs", "reason", logReason)
		return nil
	}
	action := reconcile.LostSessionAction(j.Batch)
	switch action {
	case reconcile.JobRequeue:
		why += "; the job is requeued for a new session"
	case reconcile.JobCancel:
		why += "; the job is cancelled"
	}
	why = juiceLine(why)
	if commentIsOurs(j) {
		err := a.Slurm.UpdateJob(ctx, j.ID, slurmrest.JobUpdate{Comment: &why})
		a.observeSlurm("update_job", err)
		if err != nil {
			log.Info("cannot write the reason into the job's comment", "error", err.Error())
		}
	}
	if err := a.Ender.Notify(ctx, j.ID, why); err != nil {
		log.Info("cannot tell the job's user", "error", err.Error())
	}
	switch action {
	case reconcile.JobRequeue:
		err = a.Ender.Requeue(ctx, j.ID)
	default:
		err = a.Ender.Cancel(ctx, j.ID)
	}
	if err != nil {
		return fmt.Errorf("%s job %d: %w", action, j.ID, err)
	}
	log.Info("the run cannot go on: its job is ended", "action", action.String(), "reason", logReason)
	return nil
}

// tellWait writes why the run waits (its user is at the pool's cap on GPUs) into the job's comment, where squeue
// %k and scontrol show job show it: in place of job_submit.lua's copy of the request (never the user's own comment).
func (a *Actor) tellWait(ctx context.Context, r *reconcile.Reservation) error {
	why := juiceLine(sanitizeLine(r.Status.Reason))
	j, err := a.Slurm.GetJob(ctx, r.Run.JobID)
	a.observeSlurm("get_job", err)
	if errors.Is(err, slurmrest.ErrNotFound) || err == nil && (j.Run != r.Run.Run || j.State.IsFinished()) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read job %d to tell why its run waits: %w", r.Run.JobID, err)
	}
	if !commentIsOurs(j) || j.Comment == why {
		return nil
	}
	err = a.Slurm.UpdateJob(ctx, j.ID, slurmrest.JobUpdate{Comment: &why})
	a.observeSlurm("update_job", err)
	if err != nil {
		return fmt.Errorf("write why job %d's run waits into its comment: %w", j.ID, err)
	}
	a.mu.Lock()
	if a.told == nil {
		a.told = map[uuid.UUID]string{}
	}
	a.told[r.ID] = why
	a.mu.Unlock()
	return nil
}

// untellWait puts the request back into the comment of a job whose run no longer waits, when the comment is still
// the reason this actor wrote.
func (a *Actor) untellWait(ctx context.Context, r *reconcile.Reservation) error {
	a.mu.Lock()
	why, ok := a.told[r.ID]
	a.mu.Unlock()
	if !ok || r.Status.State == reconcile.StatePending && reconcile.DecideJob(r) == reconcile.JobTellWait {
		return nil
	}
	forget := func() {
		a.mu.Lock()
		delete(a.told, r.ID)
		a.mu.Unlock()
	}
	j, err := a.Slurm.GetJob(ctx, r.Run.JobID)
	a.observeSlurm("get_job", err)
	if errors.Is(err, slurmrest.ErrNotFound) {
		forget()
		return nil
	}
	if err != nil {
		return fmt.Errorf("read job %d whose run no longer waits: %w", r.Run.JobID, err)
	}
	if j.Comment == why && j.AdminComment != "" {
		req := j.AdminComment
		err = a.Slurm.UpdateJob(ctx, j.ID, slurmrest.JobUpdate{Comment: &req})
		a.observeSlurm("update_job", err)
		if err != nil {
			return fmt.Errorf("put job %d's request back into its comment: %w", j.ID, err)
		}
	}
	forget()
	return nil
}

// juiceLine is a reason as the job's user reads it (scontrol notify, the job's comment): "juice: " and the reason,
// at most 1000 bytes.
func juiceLine(why string) string {
	why = "juice: " + why
	if len(why) > 1000 {
		why = why[:1000]
	}
	return why
}

// commentIsOurs says whether the controller may write a reason into the job's comment, where scontrol show job
// and squeue %k show it: in place of job_submit.lua's copy of the request, or of a reason written before; never
// the user's own comment, and never on a job without the trusted request (admin_comment).
func commentIsOurs(j *slurmrest.Job) bool {
	return j.AdminComment != "" && (j.Comment == "" || strings.HasPrefix(j.Comment, "juice:"))
}

// sanitizeLine keeps a reason on one line of printable text.
func sanitizeLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}

// SlurmEnder is the Ender of a running controller: slurmrestd where it can (cancel; requeue on API v0.0.45),
// scontrol for the rest (requeue before v0.0.45, notify), as the controller's own user.
type SlurmEnder struct {
	Rest     *slurmrest.Client
	Scontrol string // path of scontrol; empty: no requeue before v0.0.45, no notify
}

func (e *SlurmEnder) Requeue(ctx context.Context, job uint32) error {
	if ok, err := e.Rest.CanRequeue(ctx); err == nil && ok {
		return e.Rest.RequeueJob(ctx, job)
	}
	return e.scontrol(ctx, "requeue", strconv.FormatUint(uint64(job), 10))
}

func (e *SlurmEnder) Cancel(ctx context.Context, job uint32) error { return e.Rest.CancelJob(ctx, job) }

func (e *SlurmEnder) Notify(ctx context.Context, job uint32, msg string) error {
	return e.scontrol(ctx, "notify", strconv.FormatUint(uint64(job), 10), msg)
}

func (e *SlurmEnder) scontrol(ctx context.Context, args ...string) error {
	if e.Scontrol == "" {
		return fmt.Errorf("scontrol %s: no scontrol configured (--scontrol)", args[0])
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, e.Scontrol, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("scontrol %s: %w: %s", args[0], err, strings.TrimSpace(string(out)))
	}
	return nil
}
