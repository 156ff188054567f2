package juiceapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// PoolView is what a walk of one pool saw: its agents, each with the sessions it holds. It is how sessions
// are found without a session listing (the legacy controller has none, and its agent listing shows no
// sessions): one listing, then one read per active agent. Its cost grows with agents, not with sessions.
type PoolView struct {
	Pool string
	// Taken is when the walk started: a session that became ready later may be missing from it.
	Taken  time.Time
	Agents []Agent
	// AgentGPUs is how many GPUs each of Agents has (slim lets the GPUs themselves go): what the pool can give,
	// for the license sync (controller/licenses).
	AgentGPUs []int

	indexOnce sync.Once
	index     map[string][2]int // session id -> (agent, session) in Agents
}

// legacyAgentPage is the legacy controller's one page of agents: its listing shows at most this many, so a
// listing that long may have left agents out.
const legacyAgentPage = 20

// Whole reports whether the walk saw every agent of the pool, so that an agent missing from it is not one of the
// pool's: false when the listing may have been cut short at the legacy controller's one page of agents.
func (v *PoolView) Whole() bool { return len(v.Agents) < legacyAgentPage }

// walkReads is how many agents a walk reads at once: a pool of 12,500 agents read one at a time took longer than
// the 30 s check period on a busy machine.
const walkReads = 4

// WalkPool lists the pool's agents, then reads each active one for its sessions (walkReads at a time). An agent
// that vanished between the two is left out; any other failed read fails the walk.
func WalkPool(ctx context.Context, c Client, pool string, now time.Time) (*PoolView, error) {
	agents, err := c.ListAgents(ctx, pool)
	if err != nil {
		return nil, err
	}
	// Each agent is kept slim from the moment it is read, and the listing is let go before the reads: the full
	// answers of a 12,500-agent pool (grants, labels, connections) were over 100 MiB held for the whole walk.
	type toRead struct {
		i  int // the agent's place in the listing, kept in the view
		id string
	}
	read := make([]*Agent, len(agents))
	gpus := make([]int, len(agents))
	var todo []toRead
	for i := range agents {
		if agents[i].State == AgentActive {
			todo = append(todo, toRead{i, agents[i].ID})
			continue
		}
		a := slim(agents[i])
		read[i], gpus[i] = &a, len(agents[i].GPUs)
	}
	agents = nil
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg       sync.WaitGroup
		once     sync.Once
		firstErr error
	)
	slots := make(chan struct{}, walkReads)
	for _, t := range todo {
		if ctx.Err() != nil {
			break
		}
		slots <- struct{}{}
		wg.Add(1)
		go func(t toRead) {
			defer func() { <-slots; wg.Done() }()
			full, err := c.GetAgent(ctx, t.id)
			switch {
			case errors.Is(err, ErrNotFound):
			case err != nil:
				once.Do(func() { firstErr = err; cancel() })
			default:
				a := slim(*full)
				read[t.i], gpus[t.i] = &a, len(full.GPUs) // each goroutine its own element
			}
		}(t)
	}
	wg.Wait()
	if firstErr != nil {
		return nil, fmt.Errorf("walk pool %q: %w", pool, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("walk pool %q: %w", pool, err)
	}
	v := &PoolView{Pool: pool, Taken: now}
	for i, a := range read {
		if a != nil {
			v.Agents, v.AgentGPUs = append(v.Agents, *a), append(v.AgentGPUs, gpus[i])
		}
	}
	return v, nil
}

// slim keeps of an agent what a view is read for: who it is, its state, and each session's id, state, address,
// key and GPUs (an index and a size each: what the license sync counts). A view of a large pool is kept for a check period (reconcile.Liveness): 12,500 agents holding 100,000
// sessions with their grants, labels and connections were about 70 MiB of the controller's heap.
func slim(a Agent) Agent {
	a.GPUs, a.Labels, a.Taints = nil, nil, nil
	sessions := make([]Session, len(a.Sessions))
	for i, s := range a.Sessions {
		sessions[i] = Session{ID: s.ID, State: s.State, Address: s.Address, IdempotencyKey: s.Key(), GPUs: s.GPUs}
	}
	a.Sessions = sessions
	return a
}

// ByKey returns the sessions carrying key that have not ended, with the agent holding each.
func (v *PoolView) ByKey(key string) (sessions []Session, agents []string) {
	for _, a := range v.Agents {
		for _, s := range a.Sessions {
			if s.Key() == key && !s.Ended() && s.ID != "" {
				sessions, agents = append(sessions, s), append(agents, a.ID)
			}
		}
	}
	return sessions, agents
}

// Find returns the session with id and the agent that holds it; nil when no agent seen holds it.
// The view's index is built at the first Find: the liveness watch looks up every ready run in one view, and a
// scan per lookup was 100,000 runs × 100,000 sessions (a core for a minute every check period).
func (v *PoolView) Find(id string) (*Session, *Agent) {
	v.indexOnce.Do(func() {
		v.index = map[string][2]int{}
		for i := range v.Agents {
			for j := range v.Agents[i].Sessions {
				if _, seen := v.index[v.Agents[i].Sessions[j].ID]; !seen {
					v.index[v.Agents[i].Sessions[j].ID] = [2]int{i, j}
				}
			}
		}
	})
	at, ok := v.index[id]
	if !ok {
		return nil, nil
	}
	a := &v.Agents[at[0]]
	return &a.Sessions[at[1]], a
}

// AgentAt returns the agent seen at address (the last one listed, should two share it); nil when none is.
func (v *PoolView) AgentAt(address string) *Agent {
	var at *Agent
	for i := range v.Agents {
		if v.Agents[i].Address == address {
			at = &v.Agents[i]
		}
	}
	return at
}

// ParsePools reads "name=id,name=id" (HTTPConfig.Pools); "" is no map.
func ParsePools(text string) (map[string]string, error) {
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, item := range strings.Split(text, ",") {
		name, id, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" || id == "" || strings.ContainsAny(id, "/?# ") {
			return nil, fmt.Errorf("%q: want name=id", item)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("pool %q is mapped twice", name)
		}
		out[name] = id
	}
	return out, nil
}
