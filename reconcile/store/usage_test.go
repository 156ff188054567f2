package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// TestUsageCountsWhatWasHeldWithinThePeriod: juice-slurm report's figures, against the real PostgreSQL, from runs
// whose holding is set by hand (ready_at to the time the reservation became final, or to now while it is open),
// each clipped to the period. Worked out by hand for a period of 10 hours from t0:
//
//	A alice physics a100 2 GPUs          ready t0+1h, released t0+4h       3h × 2     = 6 GPU-h (whole)
//	B alice physics a100 1 GPU 10 GiB    ready t0-2h, released t0+1h       1h (clipped) = 1 GPU-h, 10 GiB-h
//	C bob   ml      demo 4 GPUs          ready t0+8h, still ready          2h (to until) × 4 = 8 GPU-h (whole)
//	D bob   ml      a100 1 GPU           ready t0+11h                      after the period: not counted
//	E carol physics demo 3 GPUs          failed, never ready               not counted
//	F alice physics a100 2 GPUs          ready t0-5h, released t0-1h       before the period: not counted
//	G bob   (none)  demo 1 GPU 2 GiB     ready t0+2h, failed t0+2h30m      0.5h = 0.5 GPU-h, 1 GiB-h
//	H alice physics a100 1 GPU           ready t0+9h, released t0+9h       0s: not counted
func TestUsageCountsWhatWasHeldWithinThePeriod(t *testing.T) {
	owner, s := newStores(t, "c")
	other := New(owner.pool, "other-cluster")
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := func(hours float64) *time.Time {
		at := t0.Add(time.Duration(hours * float64(time.Hour)))
		return &at
	}
	add := func(st *Store, job uint32, user, account, pool string, gpus int, vram uint64, state reconcile.State, ready, end *time.Time) {
		t.Helper()
		r, created := ensure(t, st, reconcile.NewReservation{Run: reconcile.RunID{Cluster: st.Cluster(), JobID: job},
			Request: request.Request{Pool: pool, GPUs: gpus, VRAM: vram}, UserName: user, Account: account, Partition: "gpu",
			JobState: "RUNNING", Reason: "test"})
		require.True(t, created)
		if end == nil {
			end = h(-100) // an open run's end is now, whatever updated_at says
		}
		// A fixture: the holding's times as the reconciler would have written them, at chosen times.
		_, err := owner.pool.Exec(ctx, `UPDATE juice_reservations SET state = $2, ready_at = $3, updated_at = $4 WHERE id = $1`,
			r.ID, string(state), ready, *end)
		require.NoError(t, err)
	}
	add(s, 1, "alice", "physics", "a100", 2, 0, reconcile.StateReleased, h(1), h(4))
	add(s, 2, "alice", "physics", "a100", 1, 10*vram.GiB, reconcile.StateReleased, h(-2), h(1))
	add(s, 3, "bob", "ml", "demo", 4, 0, reconcile.StateReady, h(8), nil)
	add(s, 4, "bob", "ml", "a100", 1, 0, reconcile.StateReady, h(11), nil)
	add(s, 5, "carol", "physics", "demo", 3, 0, reconcile.StateFailed, nil, h(3))
	add(s, 6, "alice", "physics", "a100", 2, 0, reconcile.StateReleased, h(-5), h(-1))
	add(s, 7, "bob", "", "demo", 1, 2*vram.GiB, reconcile.StateFailed, h(2), h(2.5))
	add(s, 8, "alice", "physics", "a100", 1, 0, reconcile.StateReleased, h(9), h(9))
	// Another cluster's run in the same database is not this cluster's usage.
	add(other, 1, "alice", "physics", "a100", 8, 0, reconcile.StateReleased, h(1), h(9))

	const gibHour = float64(vram.GiB) * 3600
	want := map[UsageBy][]Usage{
		ByUser: {
			{Key: "alice", Pool: "a100", Runs: 2, GPUSeconds: 7 * 3600, SliceByteSeconds: 10 * gibHour, WholeGPUSeconds: 6 * 3600},
			{Key: "bob", Pool: "demo", Runs: 2, GPUSeconds: 8.5 * 3600, SliceByteSeconds: 0.5 * 2 * gibHour, WholeGPUSeconds: 8 * 3600},
		},
		ByAccount: {
			{Key: "", Pool: "demo", Runs: 1, GPUSeconds: 0.5 * 3600, SliceByteSeconds: 1 * gibHour},
			{Key: "ml", Pool: "demo", Runs: 1, GPUSeconds: 8 * 3600, WholeGPUSeconds: 8 * 3600},
			{Key: "physics", Pool: "a100", Runs: 2, GPUSeconds: 7 * 3600, SliceByteSeconds: 10 * gibHour, WholeGPUSeconds: 6 * 3600},
		},
		ByPool: {
			{Key: "a100", Pool: "a100", Runs: 2, GPUSeconds: 7 * 3600, SliceByteSeconds: 10 * gibHour, WholeGPUSeconds: 6 * 3600},
			{Key: "demo", Pool: "demo", Runs: 2, GPUSeconds: 8.5 * 3600, SliceByteSeconds: 1 * gibHour, WholeGPUSeconds: 8 * 3600},
		},
	}
	for by, w := range want {
		got, err := s.Usage(ctx, by, *h(0), *h(10))
		require.NoError(t, err)
		require.Len(t, got, len(w), "by %s: %+v", by, got)
		for i := range w {
			require.Equal(t, w[i].Key, got[i].Key, "by %s", by)
			require.Equal(t, w[i].Pool, got[i].Pool, "by %s", by)
			require.Equal(t, w[i].Runs, got[i].Runs, "by %s %s", by, w[i].Key)
			require.InDelta(t, w[i].GPUSeconds, got[i].GPUSeconds, 1e-6, "by %s %s", by, w[i].Key)
			require.InDelta(t, w[i].SliceByteSeconds, got[i].SliceByteSeconds, 1, "by %s %s", by, w[i].Key)
			require.InDelta(t, w[i].WholeGPUSeconds, got[i].WholeGPUSeconds, 1e-6, "by %s %s", by, w[i].Key)
		}
	}
	// An open run counts until now when the period reaches past now: C has held 4 GPUs since t0+8h.
	got, err := s.Usage(ctx, ByPool, *h(8), time.Now().Add(time.Hour))
	require.NoError(t, err)
	require.Len(t, got, 2)
	before := time.Now()
	require.Equal(t, "demo", got[1].Key)
	require.InDelta(t, 4*before.Sub(*h(8)).Seconds(), got[1].GPUSeconds, 4*60, "C: 4 GPUs from t0+8h to now")
	_, err = s.Usage(ctx, UsageBy("user_name; DROP TABLE x"), *h(0), *h(10))
	require.Error(t, err)
}
