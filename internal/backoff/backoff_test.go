package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayDoublesWithinBounds(t *testing.T) {
	p := Policy{Base: 100 * time.Millisecond, Max: time.Second}
	for n, step := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		step *= time.Millisecond
		for i := 0; i < 200; i++ {
			d := p.Delay(n)
			if d < step/2 || d > step {
				t.Fatalf("Delay(%d) = %s, want between %s and %s", n, d, step/2, step)
			}
		}
	}
	if d := p.Delay(1000); d > time.Second {
		t.Fatalf("Delay(1000) = %s: not capped", d)
	}
	if d := (Policy{}).Delay(3); d != 0 {
		t.Fatalf("zero policy: %s", d)
	}
}

func TestDelayIsJittered(t *testing.T) {
	p := Policy{Base: time.Second, Max: time.Second}
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		seen[p.Delay(0)] = true
	}
	if len(seen) < 10 {
		t.Fatalf("50 delays took only %d values: no jitter", len(seen))
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (Policy{Base: time.Hour, Max: time.Hour}).Sleep(ctx, 0); err == nil {
		t.Fatal("Sleep on a cancelled context returned nil")
	}
}
