package queue

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/backoff"
)

func TestQueueDedupesAndRequeuesWhileProcessing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := New[string](ctx, backoff.Policy{Base: 10 * time.Millisecond, Max: time.Second})
	q.Add("a")
	q.Add("a")
	q.Add("b")
	require.Equal(t, 2, q.Len(), "a key is queued once")
	k, ok := q.Get()
	require.True(t, ok)
	require.Equal(t, "a", k)
	q.Add("a") // while a is processed: remembered, not handed to another worker
	k2, _ := q.Get()
	require.Equal(t, "b", k2)
	require.Equal(t, 0, q.Len())
	q.Done("a")
	require.Equal(t, 1, q.Len(), "a was added during processing, so it is queued again")
	q.Done("b")
}

func TestQueueDelaysAndBackoff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := New[string](ctx, backoff.Policy{Base: 20 * time.Millisecond, Max: 80 * time.Millisecond})
	start := time.Now()
	q.AddAfter("x", 50*time.Millisecond)
	k, _ := q.Get()
	require.Equal(t, "x", k)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	q.Done("x")
	for i := 0; i < 4; i++ {
		q.AddRateLimited("x")
	}
	require.Equal(t, 4, q.Failures("x"))
	q.Forget("x")
	require.Equal(t, 0, q.Failures("x"))
	cancel()
	_, ok := q.Get()
	for ok {
		_, ok = q.Get()
	}
}

// A key asked to wait several times waits once, for the earliest time: periodic requeues never multiply.
func TestQueueAddAfterKeepsOneTimerPerKey(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := New[string](ctx, backoff.Policy{Base: time.Millisecond, Max: time.Second})
	q.AddAfter("k", time.Hour)
	q.AddAfter("k", 30*time.Millisecond)
	q.AddAfter("k", time.Hour)
	require.Equal(t, 1, q.Waiting())
	k, _ := q.Get()
	require.Equal(t, "k", k)
	q.Done("k")
	require.Equal(t, 0, q.Waiting(), "the later times were superseded, not kept")
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, 0, q.Len())
}
