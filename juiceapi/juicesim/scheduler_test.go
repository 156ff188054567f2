package juicesim

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
)

const G = vram.GiB

func reqOf(pool string, n int, vram uint64) juiceapi.SessionRequirements {
	return juiceapi.SessionRequest{PoolID: pool, GPUs: n, VRAMPerGPU: vram}.Requirements("test")
}

func TestFirstFitAndSlices(t *testing.T) {
	s := newSim(t, Config{Pools: []PoolConfig{UniformPool("test", 2, 2, 80*G)}})
	get := func(id string) juiceapi.Session {
		t.Helper()
		v, err := s.Session(id)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// Two 30 GiB slices share GPU 0 of agent 1; a third does not fit there (20 GiB left) and goes
	// to GPU 1 of the same agent (first fit: agent order, then GPU order).
	a, _ := s.Request("", reqOf("test", 1, 30*G))
	b, _ := s.Request("", reqOf("test", 1, 30*G))
	c, _ := s.Request("", reqOf("test", 1, 30*G))
	for id, want := range map[string]string{a: "test-agent-1.sim:43210/0", b: "test-agent-1.sim:43210/0", c: "test-agent-1.sim:43210/1"} {
		v := get(id)
		if v.State != juiceapi.StateActive || fmt.Sprintf("%s/%d", v.Address, v.GPUs[0].Index) != want {
			t.Errorf("session %s: %s on %s/%v, want active on %s", id, v.State, v.Address, v.GPUs, want)
		}
	}
	// A whole GPU needs an untouched one: agent 1 has none left, agent 2 has two.
	w, _ := s.Request("", reqOf("test", 2, 0))
	if v := get(w); v.Address != "test-agent-2.sim:43210" || len(v.GPUs) != 2 || v.GPUs[0].VRAMRequired != 80*G {
		t.Errorf("whole-GPU session: %+v", v)
	}
	// Nothing whole is left: the next one queues, and runs once the first whole-GPU session closes.
	q, _ := s.Request("", reqOf("test", 1, 0))
	if v := get(q); v.State != juiceapi.StateQueued || len(v.GPUs) != 0 || v.Address != "" {
		t.Errorf("want queued without gpus/address, got %+v", v)
	}
	if err := s.Cancel(w); err != nil {
		t.Fatal(err)
	}
	if v := get(q); v.State != juiceapi.StateActive || v.Address != "test-agent-2.sim:43210" {
		t.Errorf("after cancel, queued session: %+v", v)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

func TestLabelsAndTaints(t *testing.T) {
	plain := UniformAgent(1, 80*G)
	plain.ID = "plain"
	labelled := UniformAgent(1, 80*G)
	labelled.ID, labelled.Labels = "labelled", map[string]string{"gpu": "a100", "zone": "1"}
	tainted := UniformAgent(1, 80*G)
	tainted.ID, tainted.Taints = "tainted", map[string]string{"dedicated": "ml"}
	cfg := Config{Pools: []PoolConfig{{ID: "p", Agents: []AgentConfig{tainted, plain, labelled}}}}

	for _, c := range []struct {
		name          string
		labels, toler map[string]string
		want          string // agent id, or "no capacity"
	}{
		{"no constraints skips the tainted agent", nil, nil, "plain"},
		{"label picks the labelled agent", map[string]string{"gpu": "a100"}, nil, "labelled"},
		{"two labels", map[string]string{"gpu": "a100", "zone": "1"}, nil, "labelled"},
		{"label value must match", map[string]string{"gpu": "h100"}, nil, "no capacity"},
		{"toleration opens the tainted agent (first fit)", nil, map[string]string{"dedicated": "ml"}, "tainted"},
		{"toleration value must match", map[string]string{"gpu": "x"}, map[string]string{"dedicated": "other"}, "no capacity"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSim(t, cfg)
			req := reqOf("p", 1, 0)
			req.MatchLabels, req.Tolerates = c.labels, c.toler
			id, err := s.Request("", req)
			if c.want == "no capacity" {
				if err == nil || !strings.HasPrefix(err.Error(), NoCapacityPrefix) {
					t.Fatalf("want no capacity, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			v, _ := s.Session(id)
			if v.Address != c.want+".sim:43210" {
				t.Errorf("assigned to %q, want agent %q", v.Address, c.want)
			}
		})
	}
}

func TestNoCapacityMessages(t *testing.T) {
	s := newSim(t, Config{Pools: []PoolConfig{UniformPool("test", 2, 8, 80*G)}})
	for _, c := range []struct {
		req  juiceapi.SessionRequirements
		want string
	}{
		{reqOf("nope", 1, 0), `no capacity: pool "nope" does not exist`},
		{reqOf("test", 9, 0), `no capacity: no agent in pool "test" can ever fit 9 GPU(s) x whole GPU (largest agent: 8 GPUs, largest GPU: 80GiB)`},
		{reqOf("test", 1, 81*G), `no capacity: no agent in pool "test" can ever fit 1 GPU(s) x 81GiB (largest agent: 8 GPUs, largest GPU: 80GiB)`},
	} {
		_, err := s.Request("", c.req)
		if err == nil || err.Error() != c.want {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
	if _, err := s.Request("", reqOf("test", 8, 80*G)); err != nil {
		t.Errorf("a request that fits exactly: %v", err)
	}
}

func TestStatePathsAndDelays(t *testing.T) {
	clock := newFakeClock()
	s := newSim(t, Config{Pools: []PoolConfig{UniformPool("test", 1, 1, 80*G)}, Now: clock.Now,
		AssignDelay: time.Second, ActivateDelay: 2 * time.Second, CancelDelay: 3 * time.Second})
	state := func(id string) string { v, _ := s.Session(id); return v.State }

	id, _ := s.Request("k1", reqOf("test", 1, 0))
	steps := []struct {
		advance time.Duration
		want    string
	}{{0, "queued"}, {999 * time.Millisecond, "queued"}, {time.Millisecond, "assigned"},
		{1999 * time.Millisecond, "assigned"}, {time.Millisecond, "active"}}
	for _, st := range steps {
		clock.Add(st.advance)
		if got := state(id); got != st.want {
			t.Fatalf("after +%v: %s, want %s", st.advance, got, st.want)
		}
	}
	_ = s.Cancel(id)
	if got := state(id); got != juiceapi.StateCanceling {
		t.Fatalf("after cancel: %s", got)
	}
	// VRAM is still held while canceling: a new whole-GPU request waits.
	id2, _ := s.Request("k2", reqOf("test", 1, 0))
	clock.Add(2 * time.Second)
	if got := state(id2); got != juiceapi.StateQueued {
		t.Fatalf("while the GPU is canceling, the next session is %s", got)
	}
	clock.Add(time.Second)
	if got := state(id); got != juiceapi.StateClosed {
		t.Fatalf("after the cancel delay: %s", got)
	}
	if got := state(id2); got != juiceapi.StateAssigned {
		t.Fatalf("freed GPU not reused: %s", got)
	}
	// Cancelling a queued session closes it at once; cancelling again is fine.
	id3, _ := s.Request("", reqOf("test", 1, 0))
	_ = s.Cancel(id3)
	if err := s.Cancel(id3); err != nil || state(id3) != juiceapi.StateClosed {
		t.Fatalf("queued cancel: %s, %v", state(id3), err)
	}
	if err := s.Cancel("nope"); !errors.Is(err, errNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
	// Same key, same session, whatever its state now.
	if again, _ := s.Request("k1", reqOf("test", 1, 0)); again != id {
		t.Fatalf("key k1 gave %s, first %s", again, id)
	}
}

func TestMissingAgentEndsSessions(t *testing.T) {
	s := newSim(t, Config{Pools: []PoolConfig{UniformPool("test", 2, 1, 80*G)}})
	a, _ := s.Request("", reqOf("test", 1, 10*G))
	b, _ := s.Request("", reqOf("test", 1, 75*G)) // does not fit next to a: agent 2
	if err := s.SetAgentState("test-agent-1", juiceapi.AgentMissing); err != nil {
		t.Fatal(err)
	}
	va, _ := s.Session(a)
	vb, _ := s.Session(b)
	if va.State != juiceapi.StateClosed || vb.State != juiceapi.StateActive {
		t.Fatalf("a %s (want closed), b %s (want active)", va.State, vb.State)
	}
	// A missing agent takes no sessions, so this queues until the agent is back.
	c, _ := s.Request("", reqOf("test", 1, 10*G))
	if v, _ := s.Session(c); v.State != juiceapi.StateQueued {
		t.Fatalf("c %s", v.State)
	}
	_ = s.SetAgentState("test-agent-1", juiceapi.AgentActive)
	if v, _ := s.Session(c); v.State != juiceapi.StateActive {
		t.Fatalf("c after return %s", v.State)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulerProperties drives the scheduler with random requests, cancels, agent failures and
// clock steps (fixed seeds), checking the bookkeeping after every operation: no GPU hands out more
// VRAM than it has, a session's GPUs are distinct and on one agent, closed sessions hold nothing,
// nothing queued fits (work conservation), and at the end all VRAM is back.
func TestSchedulerProperties(t *testing.T) {
	seeds, ops := 12, 1500
	if testing.Short() {
		seeds, ops = 3, 500
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { propertyRun(t, uint64(seed), ops) })
	}
}

func propertyRun(t *testing.T, seed uint64, ops int) {
	r := rand.New(rand.NewPCG(seed, 42))
	clock := newFakeClock()
	mixed := []AgentConfig{UniformAgent(8, 80*G), UniformAgent(4, 40*G), UniformAgent(2, 24*G)}
	mixed[1].Labels = map[string]string{"gpu": "a100"}
	mixed[2].Taints = map[string]string{"dedicated": "ml"}
	cfg := Config{
		Pools: []PoolConfig{UniformPool("test", 3, 4, 80*G), {ID: "mixed", Agents: mixed}},
		Now:   clock.Now, AssignDelay: time.Duration(r.IntN(2)) * time.Second,
		ActivateDelay: time.Duration(r.IntN(3)) * time.Second, CancelDelay: time.Duration(r.IntN(3)) * time.Second,
	}
	s := newSim(t, cfg)
	var ids, keys []string
	vrams := []uint64{0, 0, 1 * G, 10 * G, 24 * G, 40 * G, 80 * G, 81 * G}

	for i := range ops {
		switch op := r.IntN(12); {
		case op < 6:
			pool := []string{"test", "mixed", "mixed", "nope"}[r.IntN(4)]
			req := reqOf(pool, 1+r.IntN(9), vrams[r.IntN(len(vrams))])
			if r.IntN(4) == 0 {
				req.GPUs[0].VRAMRequired = uint64(1 + r.Int64N(int64(80*G))) // odd sizes too
				for j := range req.GPUs {
					req.GPUs[j].VRAMRequired = req.GPUs[0].VRAMRequired
				}
			}
			if r.IntN(5) == 0 {
				req.MatchLabels = map[string]string{"gpu": "a100"}
			}
			if r.IntN(5) == 0 {
				req.Tolerates = map[string]string{"dedicated": "ml"}
			}
			key := fmt.Sprint("key-", i)
			if len(keys) > 0 && r.IntN(10) == 0 {
				key = keys[r.IntN(len(keys))]
			}
			fits := s.oracleEverFits(req)
			id, err := s.Request(key, req)
			switch {
			case err != nil && fits:
				t.Fatalf("op %d: %v rejected although it fits an idle agent", i, err)
			case err != nil && !strings.HasPrefix(err.Error(), NoCapacityPrefix):
				t.Fatalf("op %d: unexpected error %v", i, err)
			case err == nil:
				ids, keys = append(ids, id), append(keys, key)
			}
		case op < 9 && len(ids) > 0:
			if err := s.Cancel(ids[r.IntN(len(ids))]); err != nil {
				t.Fatalf("op %d: cancel: %v", i, err)
			}
		case op == 9:
			clock.Add(time.Duration(r.IntN(1500)) * time.Millisecond)
			s.Step()
		case op == 10:
			agents := s.Agents("")
			state := []string{juiceapi.AgentActive, juiceapi.AgentActive, juiceapi.AgentMissing, juiceapi.AgentDisabled}[r.IntN(4)]
			if err := s.SetAgentState(agents[r.IntN(len(agents))].ID, state); err != nil {
				t.Fatal(err)
			}
		default:
			s.Step()
		}
		if err := s.Check(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if err := s.checkWorkConserving(); err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}

	// Drain: cancel everything, let the cancel delay pass: all VRAM must be back.
	for _, a := range s.Agents("") {
		_ = s.SetAgentState(a.ID, juiceapi.AgentActive)
	}
	for _, id := range ids {
		_ = s.Cancel(id)
	}
	clock.Add(time.Minute)
	s.Step()
	for _, ss := range s.Sessions() {
		if ss.State != juiceapi.StateClosed {
			t.Fatalf("after drain session %s is %s", ss.ID, ss.State)
		}
	}
	for _, a := range s.Agents("") {
		if len(a.Sessions) != 0 {
			t.Fatalf("agent %s still lists %d sessions", a.ID, len(a.Sessions))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.agentList {
		for _, g := range a.gpus {
			if g.used != 0 {
				t.Fatalf("agent %s GPU %d: %d bytes not returned", a.id, g.index, g.used)
			}
		}
	}
}

// oracleEverFits is an independent statement of "can ever fit" for uniform requests: some agent of
// the pool that is not closed, matching labels and taints, has enough GPUs big enough.
func (s *Sim) oracleEverFits(req juiceapi.SessionRequirements) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.agentList {
		if a.poolID != req.PoolID || a.state == juiceapi.AgentClosed || !matches(a, req) {
			continue
		}
		n := 0
		for _, g := range a.gpus {
			if g.vram >= req.GPUs[0].VRAMRequired {
				n++
			}
		}
		if n >= len(req.GPUs) {
			return true
		}
	}
	return false
}

// checkWorkConserving: right after a pass, no session that may be assigned would fit anywhere.
func (s *Sim) checkWorkConserving() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	now := s.now()
	for _, ss := range s.queue {
		if ss.state != juiceapi.StateQueued || now.Sub(ss.created) < s.assignDelay {
			continue
		}
		for _, a := range s.pools[ss.req.PoolID].agents {
			if a.state == juiceapi.AgentActive && matches(a, ss.req) && fit(a, ss.req.GPUs, false) != nil {
				return fmt.Errorf("queued session %s fits agent %s", ss.id, a.id)
			}
		}
	}
	return nil
}
