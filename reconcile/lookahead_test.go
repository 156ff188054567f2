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
		return Candidate{Run: RunID{"c", job, 0}, Request: request.Request{Pool: pool, GPUs: 1}, Priority: prio,
			SubmitTime: now.Add(-time.Duration(job) * time.Second), StateReason: reason}
	}
	cands := []Candidate{
		c(1, "a", 10, "Priority"), c(2, "a", 30, "Resources"), c(3, "a", 20, "None"), c(4, "a", 40, "JobHeldUser"),
		c(5, "a", 50, "BeginTime"), c(6, "b", 1, "Priority"), c(7, "a", 20, "Priority"),
	}
	got := Lookahead{PerPool: 2}.Select(now, cands)
	// Pool a: held 4 and begin-time 5 are not eligible; 2 (30) first, then 3 and 7 tie at 20 and 7 was
	// submitted earlier. Pool b has its own cap.
	require.Equal(t, map[RunID]bool{{"c", 2, 0}: true, {"c", 7, 0}: true, {"c", 6, 0}: true}, got)

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
