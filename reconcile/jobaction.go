package reconcile

// A JobAction is what Slurm should be asked to do for a reservation's job.
type JobAction int

const (
	// JobLeaveAlone: nothing.
	JobLeaveAlone JobAction = iota
	// JobBeginNow: a requeued run waits out Slurm's requeue delay although its session is ready; let it begin.
	JobBeginNow
)

func (a JobAction) String() string {
	switch a {
	case JobBeginNow:
		return "begin now"
	}
	return "leave alone"
}

// DecideJob is the one decision of what to ask of Slurm for a reservation's job, from its status and from what
// the poller last saw of the job. The JobActor carries it out.
func DecideJob(r *Reservation) JobAction {
	if r.Status.State == StateReady && r.Spec.Wanted && WaitsOutRequeueDelay(r.Run.Run, r.Spec.JobState, r.Spec.JobReason) {
		return JobBeginNow
	}
	return JobLeaveAlone
}
