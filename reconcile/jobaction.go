package reconcile

import (
	"time"

	"github.com/juice-slurm/juice-slurm/reconcile/policy"
)

// A JobAction is what Slurm should be asked to do for a reservation's job.
type JobAction int

const (
	// JobLeaveAlone: nothing.
	JobLeaveAlone JobAction = iota
	// JobBeginNow: a requeued run waits out Slurm's requeue delay although its session is ready; let it begin.
	JobBeginNow
	// JobLostSession: the run lost its session while its job runs (the Juice Controller closed it: its agent
	// died). No job keeps running without the GPUs it asked for: LostSessionAction says what becomes of it.
	JobLostSession
	// JobRequeue: requeue the (batch) job: its next run gets a new session.
	JobRequeue
	// JobCancel: cancel the (interactive) job, saying why.
	JobCancel
	// JobTellWait: the run waits for its user's GPUs in the pool (the site policy's max_gpus_per_user): say so
	// in the job's comment, where squeue and scontrol show it.
	JobTellWait
)

func (a JobAction) String() string {
	switch a {
	case JobBeginNow:
		return "begin now"
	case JobLostSession:
		return "lost session"
	case JobRequeue:
		return "requeue"
	case JobCancel:
		return "cancel"
	case JobTellWait:
		return "tell wait"
	}
	return "leave alone"
}

// DecideJob is the one decision of what to ask of Slurm for a reservation's job, from its status and from what
// the poller last saw of the job. The job actor (controller/jobactor) carries it out.
func DecideJob(r *Reservation) JobAction {
	if r.Status.State == StateReady && r.Spec.Wanted && WaitsOutRequeueDelay(r.Run.Run, r.Spec.JobState, r.Spec.JobReason) {
		return JobBeginNow
	}
	if LostUnderJob(r) {
		return JobLostSession
	}
	if r.Status.State == StatePending && r.Spec.Wanted && policy.IsWait(r.Status.Reason) {
		return JobTellWait
	}
	return JobLeaveAlone
}

// activeJobStates are the job states in which a run uses its session.
var activeJobStates = map[string]bool{"CONFIGURING": true, "RUNNING": true, "SUSPENDED": true}

// LostUnderJob reports whether a run that was served (its session was ready) failed while its job, as last seen,
// still runs and nobody let the run go: its session was closed under it by the Juice Controller.
func LostUnderJob(r *Reservation) bool {
	return r.Status.State == StateFailed && !r.Status.ReadyAt.IsZero() && r.Spec.Wanted && !r.Spec.RunOver &&
		activeJobStates[r.Spec.JobState]
}

// LostSessionAction is what becomes of a job whose run lost its session: a batch job is requeued, so that its
// next run gets a new session; an interactive job (srun, salloc) cannot be, and is cancelled with a reason.
func LostSessionAction(batch bool) JobAction {
	if batch {
		return JobRequeue
	}
	return JobCancel
}

// StrandedAfter is how long a run must be seen wanting its session file (WantsFile) without one before it is taken
// for stranded: the prolog renames the file into place before it exits, so a job past its prolog has it at once; a
// minute covers an epilog that removed it as its job ended until the poller sees the end, and a state directory
// read while a rename was under way.
const StrandedAfter = time.Minute

// WantsFile reports whether a run's session file must lie in the state directory: its reservation is ready, its run
// not over, and its job, as the poller last saw it, RUNNING, that is past its PrologSlurmctld, which writes the file
// before it ends.
func WantsFile(t Tracked) bool {
	return t.State == StateReady && !t.RunOver && !t.HasEnd && t.JobState == "RUNNING" && t.Run.JobID != 0
}

// Stranded is the one decision that a run is stranded: it has wanted its session file (WantsFile) since
// missingSince without one, for StrandedAfter or longer. Slurm runs its job although its PrologSlurmctld never wrote
// the file, so no task of it can have its GPUs: seen on Slurm 26.05, whose slurmctld, stopped or reconfigured,
// kills the waiting prologs, counts them done and recovers a batch step it never launched (docs/admin.md section
// 7). Such a job is ended as one whose session was lost (LostSessionAction): a batch job is requeued and runs again.
func Stranded(t Tracked, missingSince, now time.Time) bool {
	return WantsFile(t) && !missingSince.IsZero() && now.Sub(missingSince) >= StrandedAfter
}
