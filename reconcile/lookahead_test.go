package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

func TestLookahead(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := func(job uint32, pool string, prio uint64, reason string) Candidate {
		return Candidate{Run: RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: pool, GPUs: 1}, Priority: prio,
			SubmitTime: now.Add(-time.Duration(job) * time.Second), StateReason: reason}
	}
	cands := []Candidate{
		c(1, "a", 10, "Priority"), c(2, "a", 30, "Resources"), c(3, "a", 20, "None"), c(4, "a", 40, "JobHeldUser"),
		c(5, "a", 50, "BeginTime"), c(6, "b", 1, "Priority"), c(7, "a", 20, "Priority"),
	}
	got := Lookahead{PerPool: 2}.Select(now, cands)
	// Pool a: held 4 and begin-time 5 are not eligible; 2 (30) first, then 3 and 7 tie at 20 and 7 was
	// submitted earlier. Pool b has its own cap.
	require.Equal(t, map[RunID]bool{{Cluster: "c", JobID: 2, Run: 0}: true, {Cluster: "c", JobID: 7, Run: 0}: true, {Cluster: "c", JobID: 6, Run: 0}: true}, got)

	late := c(8, "a", 1, "Resources")
	late.ExpectedStart = now.Add(time.Minute)
	far := c(9, "a", 1, "Resources")
	far.ExpectedStart = now.Add(time.Hour)
	got = Lookahead{PerPool: 1, Window: 2 * time.Minute}.Select(now, append(cands, late, far))
	require.True(t, got[late.Run], "expected to start within the window")
	require.False(t, got[far.Run])
	require.Len(t, got, 3)

	require.Empty(t, Lookahead{}.Select(now, cands))
	requeued := c(5, "a", 50, "BeginTime")
	requeued.Run.Run = 1
	require.True(t, requeued.Eligible(), "a requeued run waiting out the requeue delay")
	require.False(t, c(5, "a", 50, "BeginTime").Eligible(), "a first run whose begin time is ahead")
}

// F6: one user's pending jobs take at most PerUser places of the look-ahead, whatever their priority, so another
// user's runnable job is reserved too; and a job that waits for a license is not reserved ahead at all.
func TestLookaheadIsFairPerUser(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := func(job uint32, user string, prio uint64, reason string) Candidate {
		return Candidate{Run: RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: "p", GPUs: 1}, User: user, Priority: prio,
			SubmitTime: now.Add(-time.Duration(job) * time.Second), StateReason: reason}
	}
	// alice's four jobs outrank bob's; two of hers wait for a license.
	cands := []Candidate{c(1, "alice", 90, "Licenses"), c(2, "alice", 80, "Licenses"), c(3, "alice", 70, "Priority"),
		c(4, "alice", 60, "Priority"), c(5, "alice", 50, "Resources"), c(6, "bob", 10, "Priority")}
	got := Lookahead{PerPool: 4, PerUser: 2}.Select(now, cands)
	require.Equal(t, map[RunID]bool{{Cluster: "c", JobID: 3, Run: 0}: true, {Cluster: "c", JobID: 4, Run: 0}: true, {Cluster: "c", JobID: 6, Run: 0}: true}, got)
	require.False(t, c(1, "alice", 90, "Licenses").Eligible(), "a license wait is not likely to clear soon")

	// The cap is over all pools, and PerUser 0 means none.
	other := c(7, "alice", 100, "Priority")
	other.Request.Pool = "q"
	got = Lookahead{PerPool: 4, PerUser: 2}.Select(now, append(cands, other))
	require.True(t, got[other.Run])
	require.Equal(t, 1, count(got, 3, 4), "pool q's job took one of alice's two places")
	require.Len(t, Lookahead{PerPool: 4}.Select(now, cands), 4)
}

// An account's users together take at most PerAccount places: three users of one lab each within PerUser would
// otherwise fill the pool's look-ahead ahead of another lab's runnable job. A job without an account (Slurm
// without accounting) is not capped by account.
func TestLookaheadIsFairPerAccount(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := func(job uint32, user, account string, prio uint64) Candidate {
		return Candidate{Run: RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: "p", GPUs: 1}, User: user, Account: account,
			Priority: prio, SubmitTime: now.Add(-time.Duration(job) * time.Second), StateReason: "Priority"}
	}
	cands := []Candidate{c(1, "ann", "lab1", 90), c(2, "ben", "lab1", 80), c(3, "cat", "lab1", 70), c(4, "dan", "lab1", 60),
		c(5, "eve", "lab2", 10)}
	l := Lookahead{PerPool: 4, PerUser: 2, PerAccount: 2}
	require.Equal(t, map[RunID]bool{{Cluster: "c", JobID: 1, Run: 0}: true, {Cluster: "c", JobID: 2, Run: 0}: true, {Cluster: "c", JobID: 5, Run: 0}: true}, l.Select(now, cands))

	l.PerAccount = 0
	require.Equal(t, 4, count(l.Select(now, cands), 1, 2, 3, 4), "PerAccount 0: no cap")
	for i := range cands {
		cands[i].Account = ""
	}
	require.Equal(t, 4, count(Lookahead{PerPool: 4, PerAccount: 1}.Select(now, cands), 1, 2, 3, 4), "no account: no cap")
}

func count(got map[RunID]bool, jobs ...uint32) int {
	n := 0
	for _, j := range jobs {
		if got[RunID{Cluster: "c", JobID: j}] {
			n++
		}
	}
	return n
}

// A job held back by --begin is reserved once its begin time falls within the window, and not before; a held
// job is not, whatever its begin time.
func TestLookaheadBeginTime(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := func(job uint32, reason string, begin time.Duration) Candidate {
		return Candidate{Run: RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: "a", GPUs: 1}, Priority: 1,
			SubmitTime: now.Add(-time.Hour), StateReason: reason, BeginTime: now.Add(begin), ExpectedStart: now.Add(begin)}
	}
	soon, later, held := c(1, "BeginTime", time.Minute), c(2, "BeginTime", time.Hour), c(3, "JobHeldUser", time.Minute)
	passed := c(4, "BeginTime", -time.Second) // Slurm has not re-evaluated it yet
	noTime := c(5, "BeginTime", 0)
	noTime.BeginTime = time.Time{}
	got := Lookahead{PerPool: 0, Window: 2 * time.Minute}.Select(now, []Candidate{soon, later, held, passed, noTime})
	require.Equal(t, map[RunID]bool{soon.Run: true, passed.Run: true}, got)
	require.True(t, soon.BeginsWithin(now, 2*time.Minute))
	require.False(t, later.BeginsWithin(now, 2*time.Minute))
	require.False(t, soon.BeginsWithin(now, 0), "no window, no reservation ahead of the begin time")
	require.Empty(t, Lookahead{PerPool: 4}.Select(now, []Candidate{soon, later}), "window off: begin-time jobs wait")
	// Later, the window reaches the far one.
	require.True(t, Lookahead{Window: 2 * time.Minute}.Select(now.Add(59*time.Minute), []Candidate{later})[later.Run])
}

// An array's pending elements are candidates in Slurm's order (task id), whatever job id slurmctld gave those
// already split off, each taking a place under the per-pool and per-user caps as any job does.
func TestLookaheadPicksArrayElementsInOrderUnderTheCaps(t *testing.T) {
	now := time.Now()
	submitted := now.Add(-time.Minute)
	elem := func(task uint32, job uint32, user string) Candidate {
		c := Candidate{Run: RunID{Cluster: "c", JobID: job, ArrayJobID: 40, ArrayTaskID: task},
			Request: request.Request{Pool: "p", GPUs: 1}, User: user, Priority: 10, SubmitTime: submitted, StateReason: "Priority"}
		if job == 0 {
			// The remainder waits for its own limit of elements at once (--array=...%N): its turn comes next.
			c.StateReason = "JobArrayTaskLimit"
		}
		return c
	}
	// Elements 5..9 of array 40 are pending in its remainder (no job id); element 3 was split off as job 97
	// (held back, say) and is pending too. Another user's job 50 came later with the same priority.
	cands := []Candidate{elem(9, 0, "ann"), elem(6, 0, "ann"), elem(5, 0, "ann"), elem(8, 0, "ann"), elem(7, 0, "ann"),
		elem(3, 97, "ann")}
	other := Candidate{Run: RunID{Cluster: "c", JobID: 50}, Request: request.Request{Pool: "p", GPUs: 1}, User: "bob",
		Priority: 10, SubmitTime: now, StateReason: "Priority"}
	cands = append(cands, other)

	got := Lookahead{PerPool: 4, PerUser: 3}.Select(now, cands)
	require.Equal(t, map[RunID]bool{elem(3, 97, "").Run: true, elem(5, 0, "").Run: true, elem(6, 0, "").Run: true,
		other.Run: true}, got, "ann's first three in task order, then bob's within the pool's four")

	got = Lookahead{PerPool: 2}.Select(now, cands)
	require.Equal(t, map[RunID]bool{elem(3, 97, "").Run: true, elem(5, 0, "").Run: true}, got)
	require.Equal(t, 2, Lookahead{PerPool: 2}.ArrayCandidates())
	require.Equal(t, 1, Lookahead{}.ArrayCandidates(), "one for the window when none are reserved by priority")
}

// Started runs still waiting for their session take their pool's places before pending jobs: with three of pool
// p's four places taken so, one pending job is reserved ahead; pool q is untouched. An array's element not started
// yet is not reserved through its remainder's expected start.
func TestLookaheadStartedRunsWaitingTakePlacesFirst(t *testing.T) {
	now := time.Now()
	job := func(id uint32, pool string, started bool) Candidate {
		return Candidate{Run: RunID{Cluster: "c", JobID: id}, Request: request.Request{Pool: pool, GPUs: 1}, Priority: 10,
			SubmitTime: now.Add(-time.Duration(id) * time.Second), StateReason: "Priority", Started: started}
	}
	cands := []Candidate{job(1, "p", true), job(2, "p", true), job(3, "p", true), job(4, "p", false), job(5, "p", false),
		job(6, "q", false), job(7, "q", false)}
	got := Lookahead{PerPool: 4}.Select(now, cands)
	require.Equal(t, map[RunID]bool{cands[0].Run: true, cands[1].Run: true, cands[2].Run: true, cands[4].Run: true,
		cands[5].Run: true, cands[6].Run: true}, got, "job 5 (submitted before 4) takes p's last place")

	elem := Candidate{Run: RunID{Cluster: "c", ArrayJobID: 40, ArrayTaskID: 9}, Request: request.Request{Pool: "p", GPUs: 1},
		Priority: 10, StateReason: "Priority", ExpectedStart: now.Add(time.Second)}
	got = Lookahead{PerPool: 3, Window: time.Minute}.Select(now, append(cands[:3:3], elem))
	require.False(t, got[elem.Run], "no place left, and the window does not reserve an element not started")
}

// An heir (a pending job a like run of its user runs ahead of, in a pool with hand-off on) is never reserved ahead,
// whatever its priority, and takes no place: the next job in order gets it.
func TestLookaheadLeavesHeirs(t *testing.T) {
	now := time.Unix(1700000000, 0)
	c := func(job uint32, prio uint64, heir bool) Candidate {
		return Candidate{Run: RunID{Cluster: "c", JobID: job}, Request: request.Request{Pool: "p", GPUs: 1}, User: "alice",
			Priority: prio, SubmitTime: now, StateReason: "Priority", ExpectedStart: now, Heir: heir}
	}
	got := Lookahead{PerPool: 1, PerUser: 1}.Select(now, []Candidate{c(1, 90, true), c(2, 10, false)})
	require.Equal(t, map[RunID]bool{{Cluster: "c", JobID: 2}: true}, got)
	got = Lookahead{PerPool: 1, Window: time.Minute}.Select(now, []Candidate{c(1, 90, true)})
	require.Empty(t, got, "not even when Slurm expects it to start within the window")
}
