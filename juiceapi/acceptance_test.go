package juiceapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// Acceptance 1: 1,000 concurrent requests (some cancelled at once) never over-allocate a GPU or
// VRAM. The scheduler ticks every 5 ms, so ticks race with the handlers too. Run with -race.
func TestAcceptanceConcurrentRequestsNeverOverAllocate(t *testing.T) {
	const n = 1000
	e := start(t, juicesim.Config{Tick: 5 * time.Millisecond,
		Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 4, 8, 80*G), juicesim.UniformPool("small", 2, 2, 24*G)}},
		func(h *juiceapi.HTTPConfig) { h.Timeout = 30 * time.Second })
	ctx := context.Background()
	vrams := map[string][]uint64{"test": {0, 10 * G, 20 * G, 40 * G, 80 * G}, "small": {0, 6 * G, 12 * G, 24 * G}}

	ids := make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			pool := []string{"test", "test", "test", "small"}[r.IntN(4)]
			req := juiceapi.SessionRequest{PoolID: pool, GPUs: 1 + r.IntN(2), VRAMPerGPU: vrams[pool][r.IntN(len(vrams[pool]))]}
			id, err := e.client.RequestSession(ctx, uuid.New(), req)
			if err != nil {
				errs <- fmt.Errorf("request %d (%+v): %w", i, req, err)
				return
			}
			ids[i] = id
			if i%4 == 0 { // a quarter are released again, racing with the scheduler
				if err := e.client.CancelSession(ctx, id); err != nil {
					errs <- fmt.Errorf("cancel %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if id != "" && seen[id] {
			t.Fatalf("two requests with distinct keys got session %s", id)
		}
		seen[id] = true
	}
	e.sim.Step()
	if err := e.sim.Check(); err != nil {
		t.Fatal(err)
	}
	checkNoOverAllocation(t, e.sim)
	if got := len(e.sim.Sessions()); got != n {
		t.Fatalf("%d sessions booked for %d requests", got, n)
	}

	// Release everything: every byte must come back.
	for _, id := range ids {
		if err := e.client.CancelSession(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range e.sim.Agents("") {
		for len(a.Sessions) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
			a = agentByID(e.sim, a.ID)
		}
		if len(a.Sessions) > 0 {
			t.Fatalf("agent %s still holds %d sessions after release", a.ID, len(a.Sessions))
		}
	}
	if err := e.sim.Check(); err != nil {
		t.Fatal(err)
	}
}

func agentByID(sim *juicesim.Sim, id string) juiceapi.Agent {
	for _, a := range sim.Agents("") {
		if a.ID == id {
			return a
		}
	}
	return juiceapi.Agent{}
}

// checkNoOverAllocation verifies from the public listings alone (independently of Sim.Check):
// per GPU, live sessions hold at most its VRAM, and every
// live session sits on one agent with distinct GPUs. (Whole-GPU grants show the GPU's full VRAM,
// so "alone on its GPU" follows from the sum.)
func checkNoOverAllocation(t *testing.T, sim *juicesim.Sim) {
	t.Helper()
	live := 0
	for _, a := range sim.Agents("") {
		vram := map[int]uint64{}
		for _, g := range a.GPUs {
			vram[g.Index] = g.VRAM
		}
		held := map[int]uint64{}
		for _, s := range a.Sessions {
			live++
			if s.Address != a.Address {
				t.Errorf("session %s listed on %s but addressed to %s", s.ID, a.ID, s.Address)
			}
			idx := map[int]bool{}
			for _, g := range s.GPUs {
				if idx[g.Index] {
					t.Errorf("session %s uses GPU %d twice", s.ID, g.Index)
				}
				idx[g.Index] = true
				held[g.Index] += g.VRAMRequired
			}
		}
		for i, h := range held {
			if h > vram[i] {
				t.Errorf("agent %s GPU %d: %d bytes handed out of %d", a.ID, i, h, vram[i])
			}
		}
	}
	// Every live session of the global listing appears on exactly one agent.
	n := 0
	for _, s := range sim.Sessions() {
		if s.State == juiceapi.StateAssigned || s.State == juiceapi.StateActive || s.State == juiceapi.StateCanceling {
			n++
		}
	}
	if n != live {
		t.Errorf("%d live sessions, agents list %d", n, live)
	}
}

// Acceptance 2: a repeated request with the same idempotency key returns the same session: in
// sequence, concurrently, after the session ended, and when the first answer was lost on the way.
func TestAcceptanceIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	req := juiceapi.SessionRequest{PoolID: "test", GPUs: 1, VRAMPerGPU: 8 * G}

	t.Run("sequential", func(t *testing.T) {
		e := start(t, juicesim.Config{}, nil)
		key := uuid.New()
		a, err := e.client.RequestSession(ctx, key, req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.client.RequestSession(ctx, key, req)
		if err != nil || a != b {
			t.Fatalf("same key: %s then %s (%v)", a, b, err)
		}
		if c, _ := e.client.RequestSession(ctx, uuid.New(), req); c == a {
			t.Fatal("another key gave the same session")
		}
		// After release the key still names the same (now closed) session: never a second booking.
		_ = e.client.CancelSession(ctx, a)
		if d, _ := e.client.RequestSession(ctx, key, req); d != a {
			t.Fatalf("after cancel: %s, want %s", d, a)
		}
		if s, _ := e.client.GetSession(ctx, a); s.State != juiceapi.StateClosed {
			t.Fatalf("state %s", s.State)
		}
		if n := len(e.sim.Sessions()); n != 2 {
			t.Fatalf("%d sessions, want 2", n)
		}
	})

	t.Run("concurrent", func(t *testing.T) {
		e := start(t, juicesim.Config{}, nil)
		key := uuid.New()
		ids := make([]string, 50)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids[i], _ = e.client.RequestSession(ctx, key, req)
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if id != ids[0] || id == "" {
				t.Fatalf("ids differ: %q vs %q", id, ids[0])
			}
		}
		if n := len(e.sim.Sessions()); n != 1 {
			t.Fatalf("%d sessions booked", n)
		}
	})

	t.Run("lost responses are retried safely", func(t *testing.T) {
		e := start(t, juicesim.Config{Seed: 3, Faults: juicesim.Faults{LostResponseRate: 0.5}},
			func(h *juiceapi.HTTPConfig) { h.MaxAttempts, h.IdempotentRequests = 20, true })
		for range 20 {
			key := uuid.New()
			id, err := e.client.RequestSession(ctx, key, req)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, s := range e.sim.Sessions() {
				if s.IdempotencyKey == key.String() {
					n++
					if s.ID != id {
						t.Fatalf("client got %s, simulator booked %s", id, s.ID)
					}
				}
			}
			if n != 1 {
				t.Fatalf("key %s booked %d sessions", key, n)
			}
		}
		if lost := faultsInjected(t, e.sim, "lost_response"); lost == 0 {
			t.Fatal("no response was lost: the test proves nothing")
		}
	})
}

// Acceptance 3: with 30% injected 5xx the client still completes request -> active -> cancel ->
// closed, with its default retry budget.
func TestAcceptanceThirtyPercentErrors(t *testing.T) {
	e := start(t, juicesim.Config{Seed: 30, Faults: juicesim.Faults{ErrorRate: 0.3},
		ActivateDelay: 30 * time.Millisecond, CancelDelay: 30 * time.Millisecond},
		func(h *juiceapi.HTTPConfig) { // the defaults, not the short test backoff
			h.MaxAttempts, h.InitialBackoff, h.MaxBackoff, h.Timeout = 0, 0, 0, 0
			h.IdempotentRequests = true // the simulator honours the key: the POST may be retried
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waitFor := func(id, state string) {
		t.Helper()
		for {
			s, err := e.client.GetSession(ctx, id)
			if err != nil {
				t.Fatalf("waiting for %s: %v", state, err)
			}
			if s.State == state {
				return
			}
			if state == juiceapi.StateActive && s.Ended() {
				t.Fatalf("session ended (%s) before it was active", s.State)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i := range 5 {
		key := uuid.New()
		id, err := e.client.RequestSession(ctx, key, juiceapi.SessionRequest{PoolID: "test", GPUs: 1 + i%3})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		waitFor(id, juiceapi.StateActive)
		if err := e.client.CancelSession(ctx, id); err != nil {
			t.Fatalf("round %d: cancel: %v", i, err)
		}
		waitFor(id, juiceapi.StateClosed)
	}
	if n := faultsInjected(t, e.sim, "error"); n == 0 {
		t.Fatal("no faults were injected")
	} else {
		t.Logf("%d injected 500s were absorbed by retries", n)
	}
	for _, s := range e.sim.Sessions() {
		if s.State != juiceapi.StateClosed {
			t.Fatalf("session %s left %s", s.ID, s.State)
		}
	}
	if n := len(e.sim.Sessions()); n != 5 {
		t.Fatalf("%d sessions for 5 requests", n)
	}
}

func faultsInjected(t *testing.T, sim *juicesim.Sim, kind string) int {
	t.Helper()
	n, err := world.Sum(sim.Registry(), "juice_sim_faults_injected_total", "kind", kind)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
