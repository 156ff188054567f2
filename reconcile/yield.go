package reconcile

import (
	"fmt"
	"slices"
	"strings"
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
func MustYield(r *Reservation, s Session) bool {
	return r.Spec.Wanted && Started(r.Spec.JobState) && s.Phase == SessionQueued
}

// YieldReason is why a pending job's reservation lets its pool's GPUs go to run, a started one (Store.YieldPool).
func YieldReason(pool string, run RunID) string {
	return fmt.Sprintf("yields pool %s to job %d, which Slurm started and which waits for GPUs (reserved again when its turn comes)",
		pool, run.JobID)
}
