package reconcile

import (
	"sort"
	"time"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// The look-ahead policy decides which PENDING jobs get a reservation now. Reserving at submission for the whole
// queue would hold GPUs for jobs that will not start for days; reserving only when a job starts would make every
// job wait for its session in the prolog. So a pending job is reserved when it is likely to start soon:
//
//   - it is eligible: not held, and its begin time has passed (Slurm's reason is not BeginTime, JobHeld*,
//     Dependency, ...);
//   - and either it is among the PerPool highest-priority eligible Juice jobs of its pool (ties go to the
//     earlier submission), taking at most PerUser of one user's jobs and PerAccount of one account's, or Slurm
//     expects it to start within
//     Window (the backfill scheduler's start time).
//   - A job held back only by its begin time (sbatch --begin) counts as eligible once that time falls within
//     Window, and is reserved then: its session is ready when Slurm lets it start, never earlier than that
//     (the job actor never moves a first run's begin time).
//
// PerUser keeps one user's queue from holding a pool's GPUs ahead of everybody else's runnable jobs (F6: four
// pending jobs of one user held all four GPUs of a pool and another user's job failed its prolog). A job that
// waits for a license is not eligible: a license is not likely to free up soon, and GPUs held for it are GPUs
// another job cannot start with. PerAccount does the same for an account: a group whose users each stay within
// PerUser still cannot take a whole pool's places together.
//
// In a pool with session hand-off on, a pending job that a like job of the same user runs ahead of (Candidate.Heir)
// is not reserved ahead: it takes that run's session when the run ends (Handoff), and a session of its own, queued
// in the Juice Controller behind the pool's GPUs, would only take the GPUs the running job hands on. What that
// trades: such a job that Slurm starts before a like run ends waits for a session of its own in its prolog.
//
// Jobs that are CONFIGURING or RUNNING always want their session, whatever this policy says.
type Lookahead struct {
	// PerPool caps the pending jobs of one pool reserved by priority. 0 reserves none by priority.
	PerPool int
	// PerUser caps the pending jobs of one user reserved by priority, over all pools. 0 means no cap.
	PerUser int
	// PerAccount caps the pending jobs of one Slurm account reserved by priority, over all pools. 0 means no cap.
	PerAccount int
	// Window reserves, beyond the cap, any job that Slurm expects to start within it. 0 turns this off.
	Window time.Duration
}

// DefaultLookahead reserves for the 4 best pending jobs of each pool, at most 2 of one user's and 3 of one
// account's, and for any job expected within 2 minutes.
var DefaultLookahead = Lookahead{PerPool: 4, PerUser: 2, PerAccount: 3, Window: 2 * time.Minute}

// ArrayCandidates is how many of an array's pending elements (its remainder's first task ids, in Slurm's order)
// are offered to Select: no more than a pool's places, since no more could be picked by priority, and no more
// than that are reserved through Slurm's expected start time either, which the remainder gives once for all its
// elements.
func (l Lookahead) ArrayCandidates() int {
	if l.PerPool < 1 {
		return 1
	}
	return l.PerPool
}

// A Candidate is a pending Juice job as the poller saw it.
type Candidate struct {
	Run     RunID
	Request request.Request
	// User is the job's owner (empty when slurmrestd does not say: then PerUser does not apply to it).
	User string
	// Account is the Slurm account the job is charged to (empty when unknown: then PerAccount does not apply).
	Account     string
	Priority    uint64
	SubmitTime  time.Time
	StateReason string
	// ExpectedStart is Slurm's estimate of the start time; zero when it has none.
	ExpectedStart time.Time
	// Started marks a run that Slurm started (CONFIGURING or RUNNING) whose session is not ready yet: it is always
	// reserved, and takes a place of its pool before the pending jobs (see Select).
	Started bool
	// BeginTime is the earliest time Slurm lets the job start (its eligible time: the --begin time while the
	// reason is BeginTime); zero when unknown.
	BeginTime time.Time
	// Heir marks a pending run of a pool with hand-off on that a like job (same user, account and request) runs
	// ahead of: it is never reserved ahead (see Lookahead).
	Heir bool
}

// waitReasons are Slurm's reasons for a pending job that is eligible and only waits its turn. Anything else
// (held, begin time ahead, dependency, reservation, partition down, ...) is not likely to start soon.
// JobArrayTaskLimit is an array's remainder held back by its own limit of elements running at once (--array=0-99%4):
// its next element starts as soon as a running one ends, which is when a session reserved ahead pays most.
var waitReasons = map[string]bool{"": true, "None": true, "Priority": true, "Resources": true, "JobArrayTaskLimit": true}

// Eligible reports whether the job waits only for its turn, or is a requeued run waiting out Slurm's requeue
// delay (see WaitsOutRequeueDelay).
func (c Candidate) Eligible() bool {
	return waitReasons[c.StateReason] || WaitsOutRequeueDelay(c.Run.Run, "PENDING", c.StateReason)
}

// WaitsOutRequeueDelay reports whether a job is a requeued run (restart count above 0) that waits only for the
// begin time Slurm gives a requeued job (about two minutes ahead). Such a run is reserved ahead like a job that
// waits its turn, and once its session is ready the job actor lets it begin at once instead of after the delay
// and a prolog's wait: one rule, for both decisions.
func WaitsOutRequeueDelay(run int, jobState, reason string) bool {
	return run > 0 && jobState == "PENDING" && reason == "BeginTime"
}

// BeginsWithin reports whether the job waits only for its begin time (Slurm's reason BeginTime) and that time
// falls within the window from now. Such a job is reserved ahead like one Slurm expects to start soon.
func (c Candidate) BeginsWithin(now time.Time, window time.Duration) bool {
	return window > 0 && c.StateReason == "BeginTime" && !c.BeginTime.IsZero() && !c.BeginTime.After(now.Add(window))
}

// order is the job id a run sorts by among runs of equal priority and submission: an array element's array id,
// whichever job id slurmctld gave it.
func (r RunID) order() uint32 {
	if r.Element() {
		return r.ArrayJobID
	}
	return r.JobID
}

// Select returns the runs to reserve for now. An array's pending elements are candidates one by one (see
// ArrayCandidates), each taking its place under the caps as any job does.
//
// A started run still waiting for its session (Candidate.Started) takes one of its pool's PerPool places before
// any pending job: its job holds nodes and waits in its prolog, and a GPU reserved ahead for a pending job is a GPU
// it waits longer for, while the pending job cannot start. This is what keeps an array's elements from holding the
// pool for elements not started yet when slurmctld starts more elements than the pool can serve at once.
func (l Lookahead) Select(now time.Time, cands []Candidate) map[RunID]bool {
	out := map[RunID]bool{}
	byPool := map[string][]Candidate{}
	perPool, perUser, perAccount := map[string]int{}, map[string]int{}, map[string]int{}
	for _, c := range cands {
		if c.Started {
			out[c.Run] = true
			perPool[c.Request.Pool]++
			continue
		}
		begins := c.BeginsWithin(now, l.Window)
		if c.Heir || !c.Eligible() && !begins {
			continue
		}
		// An array's element not started yet has its remainder's expected start, which is the next element's only:
		// elements are reserved by places alone.
		soon := begins || l.Window > 0 && !c.ExpectedStart.IsZero() && !c.ExpectedStart.After(now.Add(l.Window))
		if soon && !c.Run.Unbound() {
			out[c.Run] = true
		}
		byPool[c.Request.Pool] = append(byPool[c.Request.Pool], c)
	}
	// One order over every pool, so that a user's places go to its best jobs wherever they are: highest priority
	// first, ties to the earlier submission.
	var all []Candidate
	for _, cs := range byPool {
		all = append(all, cs...)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Priority != all[j].Priority {
			return all[i].Priority > all[j].Priority
		}
		if !all[i].SubmitTime.Equal(all[j].SubmitTime) {
			return all[i].SubmitTime.Before(all[j].SubmitTime)
		}
		// An array's elements share its priority and submission: they go in Slurm's order, by task id.
		if a, b := all[i].Run.order(), all[j].Run.order(); a != b {
			return a < b
		}
		return all[i].Run.ArrayTaskID < all[j].Run.ArrayTaskID
	})
	for _, c := range all {
		if perPool[c.Request.Pool] >= l.PerPool {
			continue
		}
		if l.PerUser > 0 && c.User != "" && perUser[c.User] >= l.PerUser {
			continue
		}
		if l.PerAccount > 0 && c.Account != "" && perAccount[c.Account] >= l.PerAccount {
			continue
		}
		perPool[c.Request.Pool]++
		perUser[c.User]++
		perAccount[c.Account]++
		out[c.Run] = true
	}
	return out
}
