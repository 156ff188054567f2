package juiceapi_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

func TestParsePools(t *testing.T) {
	m, err := juiceapi.ParsePools(" test=3f0c6a52-8d1e-4f7a-9f5e-2a51c1f0b7d4 , demo=abc")
	if err != nil || m["test"] != "3f0c6a52-8d1e-4f7a-9f5e-2a51c1f0b7d4" || m["demo"] != "abc" || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	if m, err := juiceapi.ParsePools(""); m != nil || err != nil {
		t.Fatalf("empty: %v %v", m, err)
	}
	for _, bad := range []string{"test", "=id", "test=", "a=1,a=2", "a=b/c"} {
		if _, err := juiceapi.ParsePools(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestKeyInVersion(t *testing.T) {
	key := uuid.New()
	s := juiceapi.Session{Version: juiceapi.TaggedVersion("juice-slurm/1.2", key)}
	if s.Key() != key.String() {
		t.Fatalf("key %q from version %q", s.Key(), s.Version)
	}
	if (&juiceapi.Session{Version: "0.0.0"}).Key() != "" {
		t.Fatal("a foreign session carries a key")
	}
	if (&juiceapi.Session{IdempotencyKey: "k", Version: "x key=other"}).Key() != "k" {
		t.Fatal("the simulator's field comes first")
	}
}

func TestCheckGrantAndGrantedGPUs(t *testing.T) {
	const G = 1 << 30
	active := func(gpus ...juiceapi.SessionGPU) *juiceapi.Session {
		return &juiceapi.Session{ID: "s", State: juiceapi.StateActive, Address: "h:1", GPUs: gpus}
	}
	whole2 := juiceapi.SessionRequest{GPUs: 2}
	slice := juiceapi.SessionRequest{GPUs: 1, VRAMPerGPU: 8 * G}
	for _, c := range []struct {
		name string
		s    *juiceapi.Session
		req  juiceapi.SessionRequest
		ok   bool
		gpus []int
	}{
		{"empty read", &juiceapi.Session{}, whole2, false, nil},
		{"no address", &juiceapi.Session{ID: "s", State: juiceapi.StateActive, GPUs: []juiceapi.SessionGPU{{Index: 0}, {Index: 1}}}, whole2, false, []int{0, 1}},
		{"fewer GPUs", active(juiceapi.SessionGPU{Index: 0}), whole2, false, []int{0}},
		{"the same GPU twice", active(juiceapi.SessionGPU{Index: 1}, juiceapi.SessionGPU{Index: 1}), whole2, false, []int{1}},
		{"more GPUs, any order: the lowest two", active(juiceapi.SessionGPU{Index: 3}, juiceapi.SessionGPU{Index: 2},
			juiceapi.SessionGPU{Index: 0}, juiceapi.SessionGPU{Index: 1}), whole2, true, []int{0, 1}},
		{"less VRAM", active(juiceapi.SessionGPU{Index: 0, VRAMRequired: 4 * G}), slice, false, nil},
		{"enough VRAM on one of two", active(juiceapi.SessionGPU{Index: 0, VRAMRequired: 4 * G},
			juiceapi.SessionGPU{Index: 1, VRAMRequired: 8 * G}), slice, true, []int{1}},
	} {
		why := juiceapi.CheckGrant(c.s, c.req)
		if (why == "") != c.ok {
			t.Errorf("%s: CheckGrant %q, want ok=%v", c.name, why, c.ok)
		}
		if got := juiceapi.GrantedGPUs(c.s, c.req); !slices.Equal(got, c.gpus) {
			t.Errorf("%s: GrantedGPUs %v, want %v", c.name, got, c.gpus)
		}
	}
}

func TestCanEverFit(t *testing.T) {
	const G = 1 << 30
	agent := func(state string, n int, vram uint64, taints map[string]string) juiceapi.Agent {
		a := juiceapi.Agent{State: state, Taints: taints}
		for i := range n {
			a.GPUs = append(a.GPUs, juiceapi.GPU{Index: i, VRAM: vram})
		}
		return a
	}
	pool := []juiceapi.Agent{agent(juiceapi.AgentActive, 4, 24*G, nil), agent(juiceapi.AgentActive, 8, 80*G, map[string]string{"d": "x"}),
		agent(juiceapi.AgentMissing, 8, 80*G, nil)}
	for _, c := range []struct {
		req juiceapi.SessionRequest
		ok  bool
	}{
		{juiceapi.SessionRequest{GPUs: 4}, true},
		{juiceapi.SessionRequest{GPUs: 5}, false}, // the 8-GPU agents are tainted or missing
		{juiceapi.SessionRequest{GPUs: 5, Tolerates: map[string]string{"d": "x"}}, true},
		{juiceapi.SessionRequest{GPUs: 1, VRAMPerGPU: 25 * G}, false},
		{juiceapi.SessionRequest{GPUs: 1, VRAMPerGPU: 24 * G}, true},
	} {
		if why := juiceapi.CanEverFit(pool, c.req); (why == "") != c.ok {
			t.Errorf("%+v: %q, want ok=%v", c.req, why, c.ok)
		}
	}
	if why := juiceapi.CanEverFit([]juiceapi.Agent{agent(juiceapi.AgentMissing, 1, G, nil)}, juiceapi.SessionRequest{GPUs: 9}); why != "" {
		t.Errorf("no active agent: the request may wait, not fail (%q)", why)
	}
}
