package juiceapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// bigView is a walk of agents agents holding per sessions each.
func bigView(agents, per int) *juiceapi.PoolView {
	v := &juiceapi.PoolView{Pool: "p"}
	for i := 0; i < agents; i++ {
		a := juiceapi.Agent{ID: fmt.Sprintf("a%d", i), State: juiceapi.AgentActive}
		for j := 0; j < per; j++ {
			a.Sessions = append(a.Sessions, juiceapi.Session{ID: fmt.Sprintf("s%d-%d", i, j), State: juiceapi.StateActive})
		}
		v.Agents = append(v.Agents, a)
	}
	return v
}

func TestPoolViewFind(t *testing.T) {
	v := bigView(50, 8)
	s, a := v.Find("s37-5")
	require.NotNil(t, s)
	require.Equal(t, "s37-5", s.ID)
	require.Equal(t, "a37", a.ID)
	s, a = v.Find("nope")
	require.Nil(t, s)
	require.Nil(t, a)
}

func TestPoolViewAgentAt(t *testing.T) {
	v := &juiceapi.PoolView{Agents: []juiceapi.Agent{
		{ID: "old", Address: "h1:1", State: juiceapi.AgentClosed},
		{ID: "other", Address: "h2:1"},
		{ID: "new", Address: "h1:1", State: juiceapi.AgentActive}, // the same host registered again
	}}
	require.Equal(t, "new", v.AgentAt("h1:1").ID, "the last one listed")
	require.Nil(t, v.AgentAt("h3:1"))
}

// BenchmarkPoolViewFind is one lookup in a view of 12,500 agents holding 100,000 sessions, as the liveness watch
// makes one per ready run: with a scan per lookup the watch took a core for a minute every period at that size.
func BenchmarkPoolViewFind(b *testing.B) {
	v := bigView(12500, 8)
	v.Find("s0-0")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s, _ := v.Find("s12499-7"); s == nil {
			b.Fatal("not found")
		}
	}
}

// fixedAgents is a Juice Controller whose listing and agent reads are fixed.
type fixedAgents struct {
	juiceapi.Client
	agents []juiceapi.Agent
}

func (f fixedAgents) ListAgents(context.Context, string) ([]juiceapi.Agent, error) {
	out := make([]juiceapi.Agent, len(f.agents))
	for i, a := range f.agents {
		a.Sessions = nil // as the legacy listing shows them
		out[i] = a
	}
	return out, nil
}

func (f fixedAgents) GetAgent(_ context.Context, id string) (*juiceapi.Agent, error) {
	for _, a := range f.agents {
		if a.ID == id {
			return &a, nil
		}
	}
	return nil, juiceapi.ErrNotFound
}

// A walk keeps what the license sync counts: each agent's number of GPUs, and each session's GPUs.
func TestWalkPoolKeepsTheGPUCounts(t *testing.T) {
	gpus := func(n int) []juiceapi.GPU { return make([]juiceapi.GPU, n) }
	c := fixedAgents{agents: []juiceapi.Agent{
		{ID: "a1", State: juiceapi.AgentActive, GPUs: gpus(8), Sessions: []juiceapi.Session{
			{ID: "s1", State: juiceapi.StateActive, GPUs: []juiceapi.SessionGPU{{Index: 2}, {Index: 5}}}}},
		{ID: "a2", State: juiceapi.AgentClosed, GPUs: gpus(4)},
		{ID: "a3", State: juiceapi.AgentActive, GPUs: gpus(2)},
	}}
	v, err := juiceapi.WalkPool(context.Background(), c, "p", time.Now())
	require.NoError(t, err)
	require.Equal(t, []int{8, 4, 2}, v.AgentGPUs)
	require.Len(t, v.Agents, 3)
	require.Nil(t, v.Agents[0].GPUs, "the GPUs themselves are let go")
	require.Equal(t, []juiceapi.SessionGPU{{Index: 2}, {Index: 5}}, v.Agents[0].Sessions[0].GPUs)
}
