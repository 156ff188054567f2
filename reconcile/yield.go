package reconcile

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// StartedStates are Slurm's states of a job it has started: given nodes, its prolog running or done. The store's
// guard against a stale listing (sqlObserveJob) is built from this list.
var StartedStates = []string{"CONFIGURING", "RUNNING", "SUSPENDED"}

// Started reports whether Slurm has started a job, from its state as the spec records it (Spec.JobState).
func Started(jobState string) bool { return slices.Contains(StartedStates, strings.ToUpper(jobState)) }

// MustYield reports whether a run's queued session means the pool's GPUs must go to it first: its job was started
// by Slurm (it holds nodes, and with the pools as licenses the pool's license), yet the Juice Controller has no
// GPU for it, so GPUs of the pool held or queued for ahead, for jobs Slurm keeps pending, are in its way. Without
// this, a job Slurm started in another order than the look-ahead reserved waits in its prolog for a GPU that a
// pending job holds, which cannot start while the started job holds the license: until the prolog gives up and
// the job is requeued.
//
// Every session is queued until the Juice Controller's scheduler looks at it (once a second, a bounded number of
// placements a tick), so a session only just queued says nothing about the pool: only one queued for QueueGrace
// since its reservation last moved (Status.UpdatedAt, its move to waiting) has found no GPU. Without the grace, a
// burst that starts a job while the look-ahead's sessions of the same pass are still queued made the pending jobs
// yield a pool that had room for all of them, and each such run paid a second reservation and session.
func MustYield(r *Reservation, s Session, now time.Time) bool {
	return r.Spec.Wanted && Started(r.Spec.JobState) && s.Phase == SessionQueued && now.Sub(r.Status.UpdatedAt) >= QueueGrace
}

// QueueGrace is how long a started run's session stays queued before MustYield takes it for one the pool has no
// GPU for: a few of the Juice Controller's scheduler ticks (1 s each at the legacy controller, 500 ms at juice-sim).
const QueueGrace = 3 * time.Second

// YieldReason is why a pending job's reservation lets its pool's GPUs go to run, a started one (Store.YieldPool).
func YieldReason(pool string, run RunID) string {
	return fmt.Sprintf("yields pool %s to job %d, which Slurm started and which waits for GPUs (reserved again when its turn comes)",
		pool, run.JobID)
}

// Yielded reports whether a run let its pool go while its job was pending: one of its reservations ended, its run
// not over, while Slurm showed the job pending (a yield to a started run, Store.YieldPool, or a hold). The
// look-ahead does not reserve such a run again while a run Slurm started in its pool still waits for GPUs
// (plan.starved): its new session would queue behind that run's and be let go again once QueueGrace passed, a
// session asked for and cancelled at every poll for as long as the started run waits.
func Yielded(records []Tracked) bool {
	for _, r := range records {
		if r.State.Final() && r.State != StateFailed && !r.RunOver && !Started(r.JobState) {
			return true
		}
	}
	return false
}
