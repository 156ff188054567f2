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
//     earlier submission), or Slurm expects it to start within Window (the backfill scheduler's start time).
//
// Jobs that are CONFIGURING or RUNNING always want their session, whatever this policy says.
type Lookahead struct {
	// PerPool caps the pending jobs of one pool reserved by priority. 0 reserves none by priority.
	PerPool int
	// Window reserves, beyond the cap, any job that Slurm expects to start within it. 0 turns this off.
	Window time.Duration
}

// DefaultLookahead reserves for the 4 best pending jobs of each pool, and for any job expected within 2 minutes.
var DefaultLookahead = Lookahead{PerPool: 4, Window: 2 * time.Minute}

// A Candidate is a pending Juice job as the poller saw it.
type Candidate struct {
	Run         RunID
	Request     request.Request
	Priority    uint64
	SubmitTime  time.Time
	StateReason string
	// ExpectedStart is Slurm's estimate of the start time; zero when it has none.
	ExpectedStart time.Time
}

// waitReasons are Slurm's reasons for a pending job that is eligible and only waits its turn. Anything else
// (held, begin time ahead, dependency, reservation, partition down, ...) is not likely to start soon.
var waitReasons = map[string]bool{"": true, "None": true, "Priority": true, "Resources": true, "Licenses": true}

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

// Select returns the runs to reserve for now.
func (l Lookahead) Select(now time.Time, cands []Candidate) map[RunID]bool {
	out := map[RunID]bool{}
	byPool := map[string][]Candidate{}
	for _, c := range cands {
		if !c.Eligible() {
			continue
		}
		if l.Window > 0 && !c.ExpectedStart.IsZero() && !c.ExpectedStart.After(now.Add(l.Window)) {
			out[c.Run] = true
		}
		byPool[c.Request.Pool] = append(byPool[c.Request.Pool], c)
	}
	for _, cs := range byPool {
		sort.Slice(cs, func(i, j int) bool {
			if cs[i].Priority != cs[j].Priority {
				return cs[i].Priority > cs[j].Priority
			}
			if !cs[i].SubmitTime.Equal(cs[j].SubmitTime) {
				return cs[i].SubmitTime.Before(cs[j].SubmitTime)
			}
			return cs[i].Run.JobID < cs[j].Run.JobID
		})
		for i := 0; i < len(cs) && i < l.PerPool; i++ {
			out[cs[i].Run] = true
		}
	}
	return out
}
