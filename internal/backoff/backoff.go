// Package backoff is the one retry delay of juice-slurm: exponential, capped, with "equal jitter" (half of each
// step fixed, half random), so that many callers failing together spread out while none retries at once.
// The work queue, the Juice and slurmrestd clients, the LISTEN connection, the hooks and the start-up waits all
// use it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a base delay, doubled after each failure, never above Max.
type Policy struct {
	Base, Max time.Duration
}

// Delay is the wait after n failures in a row (n = 0 for the first retry): Base·2^n capped at Max, of which
// the second half is random.
func (p Policy) Delay(n int) time.Duration {
	d := p.Base
	if d <= 0 {
		return 0
	}
	for i := 0; i < n && d < p.Max; i++ {
		d *= 2
	}
	if p.Max > 0 && d > p.Max {
		d = p.Max
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Sleep waits Delay(n), or less when ctx ends first (then it returns ctx's error).
func (p Policy) Sleep(ctx context.Context, n int) error {
	return SleepFor(ctx, p.Delay(n))
}

// SleepFor waits d, or less when ctx ends first (then it returns ctx's error).
func SleepFor(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
