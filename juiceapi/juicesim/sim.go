// Package juicesim simulates the Juice Controller's legacy REST API, for tests (in-process) and for
// people trying juice-slurm without a real pool (cmd/juice-sim).
package juicesim

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// Version is reported by GET /v1/status.
const Version = "juice-sim/1"

// Sim is the simulated controller. It is an http.Handler; StartServer serves it on a listener.
type Sim struct {
	log      logr.Logger
	now      func() time.Time
	hostname string
	handler  http.Handler
	metrics  *metrics

	tick, assignDelay, activateDelay, cancelDelay, agentTimeout time.Duration

	tokenMu sync.RWMutex
	token   string

	faultMu sync.Mutex
	faults  Faults
	rng     *rand.Rand

	mu        sync.Mutex
	pools     map[string]*pool
	poolOrder []string
	agents    map[string]*agent
	agentList []*agent
	sessions  map[string]*session
	// moving holds the sessions on an agent that a scheduler pass may move on (assigned, canceling), so that a
	// pass costs what is moving, not every agent and session: at 12,500 agents and 100,000 sessions a pass over
	// all of them per request made the simulator, not the client, the bottleneck of a benchmark.
	moving map[*session]struct{}
	order  []*session // every session ever, in arrival order
	queue  []*session // queued, in arrival order
	keys   map[string]*session
	dirty  bool // something changed that may let a queued session in

	legacy       Legacy
	crashed      string // why the controller "exited" (Legacy.CrashOnNeverFit); every /v1 call is dropped after
	reopened     int    // cancels that reopened a closed session (Legacy.CancelReopens)
	agentsKilled int    // agents that exited on a cancel of a session they had not taken

	done      chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New builds a simulator. It starts the scheduler ticker when cfg.Tick > 0; call Close to stop it.
// An invalid configuration is an error.
func New(cfg Config, log logr.Logger) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("juice-sim config: %w", err)
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	s := &Sim{
		log: log, now: cfg.Now, hostname: cfg.Hostname,
		tick: cfg.Tick, assignDelay: cfg.AssignDelay, activateDelay: cfg.ActivateDelay,
		cancelDelay: cfg.CancelDelay, agentTimeout: cfg.AgentTimeout,
		token: cfg.Token, faults: cfg.Faults,
		pools: map[string]*pool{}, agents: map[string]*agent{}, sessions: map[string]*session{}, moving: map[*session]struct{}{},
		keys: map[string]*session{}, done: make(chan struct{}), legacy: cfg.Legacy,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.hostname == "" {
		s.hostname = "juice-sim"
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for _, pc := range cfg.Pools {
		p := s.addPoolLocked(pc.ID)
		for i, ac := range pc.Agents {
			if ac.ID == "" {
				ac.ID = defaultAgentID(pc.ID, i) // named after the pool's name, whatever its id
			}
			a := newAgent(p.id, i, ac)
			a.lastSeen = s.now()
			s.addAgentLocked(p, a)
		}
	}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	if s.tick > 0 {
		s.wg.Add(1)
		go s.run()
	}
	return s, nil
}

func newAgent(poolID string, i int, ac AgentConfig) *agent {
	a := &agent{
		id: ac.ID, hostname: ac.Hostname, address: ac.Address, poolID: poolID, state: ac.State,
		labels: ac.Labels, taints: ac.Taints, version: Version,
	}
	if a.id == "" {
		a.id = defaultAgentID(poolID, i)
	}
	if a.hostname == "" {
		a.hostname = a.id + ".sim"
	}
	if a.address == "" {
		a.address = a.hostname + ":43210" // the legacy agent's default port
	}
	if a.state == "" {
		a.state = juiceapi.AgentActive
	}
	for j, g := range ac.GPUs {
		a.gpus = append(a.gpus, &gpu{index: j, uuid: fmt.Sprintf("GPU-%s-%d", a.id, j), name: g.Name, vram: g.VRAM})
	}
	return a
}

func (s *Sim) addPoolLocked(name string) *pool {
	id := name
	if s.legacy.PoolUUIDs {
		id = uuid.NewSHA1(legacyPoolNamespace, []byte(name)).String()
	}
	p := &pool{id: id, name: name}
	s.pools[id] = p
	s.poolOrder = append(s.poolOrder, id)
	return p
}

func (s *Sim) addAgentLocked(p *pool, a *agent) {
	p.agents = append(p.agents, a)
	s.agents[a.id] = a
	s.agentList = append(s.agentList, a)
	s.dirty = true
}

// run is the legacy once-per-tick scheduler.
func (s *Sim) run() {
	defer s.wg.Done()
	t := time.NewTicker(s.tick)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.Step()
		}
	}
}

// Close stops the ticker and releases hung requests. The handler keeps answering afterwards.
func (s *Sim) Close() {
	s.closeOnce.Do(func() { close(s.done) })
	s.wg.Wait()
}

// ServeHTTP serves the controller API, the admin API and /metrics.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Step runs one scheduler pass now (whatever the tick), e.g. after moving a fake clock.
func (s *Sim) Step() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
}

// Sessions lists every session ever requested, closed ones included, in arrival order.
func (s *Sim) Sessions() []juiceapi.Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAdvanceLocked()
	out := make([]juiceapi.Session, 0, len(s.order))
	for _, ss := range s.order {
		out = append(out, ss.view())
	}
	return out
}

// Session returns one session, as GET /v1/session/{id} would.
func (s *Sim) Session(id string) (juiceapi.Session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAdvanceLocked()
	ss, ok := s.sessions[id]
	if !ok {
		return juiceapi.Session{}, fmt.Errorf("session %s %w", id, errNotFound)
	}
	return s.wireSessionLocked(ss), nil
}

// Agents lists the agents of a pool (all pools when poolID is empty), as GET /v1/agents does.
func (s *Sim) Agents(poolID string) []juiceapi.Agent {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAdvanceLocked()
	out := []juiceapi.Agent{}
	for _, a := range s.agentList {
		if s.legacy.NoSessionListing && (a.state != juiceapi.AgentActive || len(out) == 20) {
			continue // legacy: active agents only, one page of 20
		}
		if poolID == "" || a.poolID == poolID {
			out = append(out, s.wireAgentLocked(a, true))
		}
	}
	return out
}

// Request books a session as POST /v1/request/session would, key being the Idempotency-Key.
func (s *Sim) Request(key string, req juiceapi.SessionRequirements) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAdvanceLocked()
	return s.requestLocked(key, req)
}

// Cancel cancels a session as DELETE /v1/session/{id} would.
func (s *Sim) Cancel(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maybeAdvanceLocked()
	return s.cancelLocked(id)
}

// SetAgentState sets an agent active, disabled, missing or closed. Missing and closed end the
// agent's sessions at once; disabled keeps them but takes no new ones.
func (s *Sim) SetAgentState(id, state string) error {
	if !slices.Contains([]string{juiceapi.AgentActive, juiceapi.AgentDisabled, juiceapi.AgentMissing, juiceapi.AgentClosed}, state) {
		return fmt.Errorf("agent state %q: want active, disabled, missing or closed", state)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.agents[id]
	if !ok {
		return fmt.Errorf("agent %s %w", id, errNotFound)
	}
	if state == juiceapi.AgentActive {
		a.lastSeen = s.now() // coming back counts as a heartbeat
	}
	s.setAgentStateLocked(a, state, "set by admin")
	s.maybeAdvanceLocked()
	return nil
}

// Check verifies the allocation bookkeeping (no GPU over-allocated, no session spanning agents,
// ended sessions holding nothing). Tests call it after load; it is also GET /admin/check.
func (s *Sim) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkLocked()
}

// Faults returns the faults in force.
func (s *Sim) Faults() Faults {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.faults
}

// SetFaults replaces the faults in force.
func (s *Sim) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.faultMu.Lock()
	s.faults = f
	s.faultMu.Unlock()
	s.log.Info("faults set", "faults", f)
	return nil
}

// SetToken replaces the accepted M2M token (rotation); "" disables authentication.
func (s *Sim) SetToken(token string) {
	s.tokenMu.Lock()
	s.token = token
	s.tokenMu.Unlock()
}

func (s *Sim) currentToken() string {
	s.tokenMu.RLock()
	defer s.tokenMu.RUnlock()
	return s.token
}
