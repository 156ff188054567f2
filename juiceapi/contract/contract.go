// Package contract is the juiceapi contract suite: what juice-slurm's reconciler relies on from a Juice
// Controller, checked through the real client. It runs against juice-sim (its default and its legacy profile,
// in-process: contract_test.go) and against the legacy open-source controller in the test bed
// (test/juicelegacy, build tag legacy). A controller that passes it can serve juice-slurm.
package contract

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// Target is one counterparty.
type Target struct {
	Client juiceapi.Client
	// Pool is the name of a pool with an active agent of at least 2 GPUs of at least 2 GiB, and none of more
	// than 32 GPUs or 1 TiB per GPU.
	Pool string
	// Within bounds each wait for a state (the legacy controller: about 1 s a step).
	Within time.Duration
	// Poll is the time between two reads. Default 50ms.
	Poll time.Duration
}

// Run runs every case against the target, one after the other (a real controller's agents are shared).
func Run(t *testing.T, tg Target) {
	if tg.Poll == 0 {
		tg.Poll = 50 * time.Millisecond
	}
	if tg.Within == 0 {
		tg.Within = 20 * time.Second
	}
	t.Run("TwoGPUs", func(t *testing.T) { lifecycle(t, tg, juiceapi.SessionRequest{PoolID: tg.Pool, GPUs: 2}) })
	t.Run("VRAMSlice", func(t *testing.T) {
		lifecycle(t, tg, juiceapi.SessionRequest{PoolID: tg.Pool, GPUs: 1, VRAMPerGPU: 1536 * vram.MiB})
	})
	t.Run("SameKeyTwiceIsFoundAndCancelled", func(t *testing.T) { sameKeyTwice(t, tg) })
	t.Run("NeverFitIsRefusedBeforeSending", func(t *testing.T) { neverFit(t, tg) })
	t.Run("UnknownPoolIsRefused", func(t *testing.T) {
		_, err := tg.Client.RequestSession(context.Background(), uuid.New(), juiceapi.SessionRequest{PoolID: "no-such-pool-" + uuid.NewString()[:8], GPUs: 1})
		if !errors.Is(err, juiceapi.ErrNoCapacity) {
			t.Fatalf("want no capacity, got %v", err)
		}
	})
	t.Run("UnknownSessionIsNotFound", func(t *testing.T) {
		_, err := tg.Client.GetSession(context.Background(), uuid.NewString())
		if !errors.Is(err, juiceapi.ErrNotFound) {
			t.Fatalf("want not found, got %v", err)
		}
		if err := tg.Client.CancelSession(context.Background(), uuid.NewString()); !errors.Is(err, juiceapi.ErrNotFound) {
			t.Fatalf("cancel: want not found, got %v", err)
		}
	})
}

// lifecycle: requested -> (queued, possibly read back empty) -> active with what was asked, found by its key on
// its agent; cancelled -> closed; cancelled again, it stays closed.
func lifecycle(t *testing.T, tg Target, req juiceapi.SessionRequest) {
	ctx := context.Background()
	key := uuid.New()
	id, err := tg.Client.RequestSession(ctx, key, req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tg.Client.CancelSession(ctx, id) // reads first: never reopens
		}
	}()
	s := waitState(t, tg, id, juiceapi.StateActive)
	if why := juiceapi.CheckGrant(s, req); why != "" {
		t.Fatalf("active session does not serve the request: %s", why)
	}
	if got := juiceapi.GrantedGPUs(s, req); len(got) != req.GPUs || !slices.IsSorted(got) {
		t.Fatalf("granted GPUs %v for %d asked", got, req.GPUs)
	}
	if s.Key() != key.String() {
		t.Fatalf("the session carries key %q, want %s (version %q)", s.Key(), key, s.Version)
	}
	view, err := juiceapi.WalkPool(ctx, tg.Client, tg.Pool, time.Now())
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	found, agents := view.ByKey(key.String())
	if len(found) != 1 || found[0].ID != id {
		t.Fatalf("walking the pool found %v by key, want exactly %s", ids(found), id)
	}
	if on, _ := view.Find(id); on == nil || agents[0] == "" {
		t.Fatalf("session %s not on an agent of the walk", id)
	}
	if err := tg.Client.CancelSession(ctx, id); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	waitState(t, tg, id, juiceapi.StateClosed)
	done = true
	if err := tg.Client.CancelSession(ctx, id); err != nil {
		t.Fatalf("cancel again: %v", err)
	}
	// A closed session cancelled again must not reopen (the legacy controller would make it canceling).
	time.Sleep(2 * tg.Poll)
	if s, err := tg.Client.GetSession(ctx, id); err != nil || s.State != juiceapi.StateClosed {
		t.Fatalf("after a second cancel: %+v, %v: want closed", s, err)
	}
}

// sameKeyTwice: a request repeated with the same key (a retry after a lost answer) gives one session
// (idempotent controller) or two (legacy); either way walking the pool finds every one by the key, and
// cancelling what it finds leaves none.
func sameKeyTwice(t *testing.T, tg Target) {
	ctx := context.Background()
	key := uuid.New()
	req := juiceapi.SessionRequest{PoolID: tg.Pool, GPUs: 1}
	var booked []string
	for range 2 {
		id, err := tg.Client.RequestSession(ctx, key, req)
		if err != nil {
			t.Fatalf("request: %v", err)
		}
		if !slices.Contains(booked, id) {
			booked = append(booked, id)
		}
	}
	for _, id := range booked {
		waitState(t, tg, id, juiceapi.StateActive)
	}
	view, err := juiceapi.WalkPool(ctx, tg.Client, tg.Pool, time.Now())
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	found, _ := view.ByKey(key.String())
	if got := ids(found); !sameSet(got, booked) {
		t.Fatalf("found %v by key, booked %v", got, booked)
	}
	for _, s := range found {
		if err := tg.Client.CancelSession(ctx, s.ID); err != nil {
			t.Fatalf("cancel %s: %v", s.ID, err)
		}
	}
	for _, id := range booked {
		waitState(t, tg, id, juiceapi.StateClosed)
	}
	t.Logf("%d session(s) for one key (1: the controller honours Idempotency-Key)", len(booked))
}

// neverFit: more GPUs than any agent has, or more VRAM than any GPU, is refused as no capacity, and the
// controller still answers afterwards (the legacy one exits on such a request, if it is sent).
func neverFit(t *testing.T, tg Target) {
	ctx := context.Background()
	for _, req := range []juiceapi.SessionRequest{
		{PoolID: tg.Pool, GPUs: 64},
		{PoolID: tg.Pool, GPUs: 1, VRAMPerGPU: 2 << 40},
	} {
		_, err := tg.Client.RequestSession(ctx, uuid.New(), req)
		if !errors.Is(err, juiceapi.ErrNoCapacity) {
			t.Fatalf("%+v: want no capacity, got %v", req, err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // past a legacy backend tick: it would have exited by now
	if _, err := tg.Client.Status(ctx); err != nil {
		t.Fatalf("the controller no longer answers: %v", err)
	}
}

func waitState(t *testing.T, tg Target, id, state string) *juiceapi.Session {
	t.Helper()
	deadline := time.Now().Add(tg.Within)
	last := "nothing read"
	for time.Now().Before(deadline) {
		s, err := tg.Client.GetSession(context.Background(), id)
		switch {
		case err != nil:
			last = err.Error()
		case s.State == state:
			return s
		case state == juiceapi.StateActive && s.Ended():
			t.Fatalf("session %s ended (%s) before it was active", id, s.State)
		default:
			last = "state " + s.State
			if s.Unassigned() {
				last = "unassigned (read back empty or queued)"
			}
		}
		time.Sleep(tg.Poll)
	}
	t.Fatalf("session %s not %s within %s: %s", id, state, tg.Within, last)
	return nil
}

func ids(ss []juiceapi.Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID
	}
	return out
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
