package juicesim

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

const maxRequestBody = 1 << 20

// IdempotencyKeyHeader carries the caller's key on POST /v1/request/session.
const IdempotencyKeyHeader = "Idempotency-Key"

func (s *Sim) routes() http.Handler {
	mux := http.NewServeMux()
	v1 := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.instrument(pattern, s.exited(s.auth(s.withFaults(h)))))
	}
	v1("GET /v1/status", s.handleStatus)
	v1("POST /v1/request/session", s.handleRequestSession)
	v1("GET /v1/session/{id}", s.handleGetSession)
	v1("DELETE /v1/session/{id}", s.handleCancelSession)
	v1("GET /v1/agents", s.handleListAgents)
	v1("POST /v1/register/agent", s.handleRegisterAgent)
	v1("GET /v1/agent/{id}", s.handleGetAgent)
	v1("PUT /v1/agent/{id}", s.handleUpdateAgent)
	v1("PUT /v1/pool", s.handleCreatePool)
	v1("GET /v1/pool/{id}", s.handleGetPool)
	v1("DELETE /v1/pool/{id}", s.handleDeletePool)
	v1("GET /v1/pools", s.handleListPools)

	admin := func(pattern string, h http.HandlerFunc) {
		mux.Handle(pattern, s.instrument(pattern, s.auth(h)))
	}
	admin("GET /admin/sessions", s.handleAdminSessions)
	admin("GET /admin/faults", s.handleGetFaults)
	admin("PUT /admin/faults", s.handlePutFaults)
	admin("PUT /admin/agents/{id}", s.handleAdminAgent)
	admin("POST /admin/step", s.handleAdminStep)
	admin("GET /admin/check", s.handleAdminCheck)

	// Metrics and health hold no secrets and must work while faults are injected.
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// exited drops every connection once the simulated controller exited (Legacy.CrashOnNeverFit), as a dead
// process would refuse them.
func (s *Sim) exited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		down := s.crashed != ""
		s.mu.Unlock()
		if down {
			dropConnection(w)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// auth checks the bearer token in constant time; a bad or missing token gets the legacy 401.
func (s *Sim) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		want := s.currentToken()
		if want != "" {
			scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = io.WriteString(w, `{"message":"Failed to validate JWT."}`)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// legacyError answers the way the legacy controller does: 500 text/plain with the error text,
// whatever the cause (not-found included).
func legacyError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	_, _ = io.WriteString(w, err.Error())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeText(w http.ResponseWriter, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, s)
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBody))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid request body: %w", err)
	}
	return nil
}

// step runs the scheduler before a read in instant mode, so reads see the latest state.
func (s *Sim) lockAndStep() func() {
	s.mu.Lock()
	s.maybeAdvanceLocked()
	return s.mu.Unlock
}

func (s *Sim) handleStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, juiceapi.Status{State: "Active", Version: Version, Hostname: s.hostname})
}

func (s *Sim) handleRequestSession(w http.ResponseWriter, r *http.Request) {
	var req juiceapi.SessionRequirements
	if err := decodeBody(r, &req); err != nil {
		legacyError(w, err)
		return
	}
	key := strings.TrimSpace(r.Header.Get(IdempotencyKeyHeader))
	if len(key) > 255 {
		legacyError(w, errors.New("invalid Idempotency-Key: longer than 255 bytes"))
		return
	}
	id, err := s.Request(key, req)
	if err != nil {
		legacyError(w, err)
		return
	}
	writeText(w, id)
}

func (s *Sim) handleGetSession(w http.ResponseWriter, r *http.Request) {
	ss, err := s.Session(r.PathValue("id"))
	if err != nil {
		legacyError(w, err)
		return
	}
	writeJSON(w, ss)
}

func (s *Sim) handleCancelSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.Cancel(id); err != nil {
		legacyError(w, err)
		return
	}
	writeJSON(w, fmt.Sprintf("Session %s cancelled", id))
}

func (s *Sim) handleListAgents(w http.ResponseWriter, r *http.Request) {
	poolID := r.URL.Query().Get("pool_id")
	if poolID != "" {
		s.mu.Lock()
		_, ok := s.pools[poolID]
		s.mu.Unlock()
		if !ok && !s.legacy.PoolUUIDs { // legacy: a filter that matches nothing
			legacyError(w, fmt.Errorf("pool %s %w", poolID, errNotFound))
			return
		}
	}
	writeJSON(w, s.Agents(poolID))
}

// handleRegisterAgent adds an agent to a pool (a real agent, or a script playing one). Such agents
// must send PUT /v1/agent/{id} heartbeats, or go missing after Config.AgentTimeout.
func (s *Sim) handleRegisterAgent(w http.ResponseWriter, r *http.Request) {
	var in juiceapi.Agent
	if err := decodeBody(r, &in); err != nil {
		legacyError(w, err)
		return
	}
	if len(in.GPUs) == 0 {
		legacyError(w, errors.New("invalid agent: no GPUs"))
		return
	}
	ac := AgentConfig{ID: in.ID, Hostname: in.Hostname, Address: in.Address, Labels: in.Labels, Taints: in.Taints}
	for _, g := range in.GPUs {
		if g.VRAM == 0 {
			legacyError(w, fmt.Errorf("invalid agent: GPU %d has no VRAM", g.Index))
			return
		}
		ac.GPUs = append(ac.GPUs, GPUConfig{Name: g.Name, VRAM: g.VRAM})
	}
	defer s.lockAndStep()()
	p, ok := s.pools[in.PoolID]
	if !ok {
		legacyError(w, fmt.Errorf("pool %s %w", in.PoolID, errNotFound))
		return
	}
	if ac.ID == "" {
		ac.ID = uuid.NewString()
	}
	if _, dup := s.agents[ac.ID]; dup {
		legacyError(w, fmt.Errorf("agent %s already registered", ac.ID))
		return
	}
	a := newAgent(p.id, len(p.agents), ac)
	a.registered, a.lastSeen = true, s.now()
	if in.Version != "" {
		a.version = in.Version
	}
	s.addAgentLocked(p, a)
	s.log.Info("agent registered", "agent", a.id, "pool", p.id, "gpus", len(a.gpus))
	s.maybeAdvanceLocked()
	writeText(w, a.id)
}

func (s *Sim) handleGetAgent(w http.ResponseWriter, r *http.Request) {
	defer s.lockAndStep()()
	a, ok := s.agents[r.PathValue("id")]
	if !ok {
		legacyError(w, fmt.Errorf("agent %s %w", r.PathValue("id"), errNotFound))
		return
	}
	writeJSON(w, s.wireAgentLocked(a, false))
}

// handleUpdateAgent is the agent's heartbeat; a state in the body changes the agent's state.
func (s *Sim) handleUpdateAgent(w http.ResponseWriter, r *http.Request) {
	var upd AgentUpdate
	if r.ContentLength != 0 {
		if err := decodeBody(r, &upd); err != nil && !errors.Is(err, io.EOF) {
			legacyError(w, err)
			return
		}
	}
	defer s.lockAndStep()()
	a, ok := s.agents[r.PathValue("id")]
	if !ok {
		legacyError(w, fmt.Errorf("agent %s %w", r.PathValue("id"), errNotFound))
		return
	}
	a.lastSeen = s.now()
	switch upd.State {
	case "":
		if a.state == juiceapi.AgentMissing {
			s.setAgentStateLocked(a, juiceapi.AgentActive, "heartbeat")
		}
	case juiceapi.AgentActive, juiceapi.AgentDisabled, juiceapi.AgentMissing, juiceapi.AgentClosed:
		s.setAgentStateLocked(a, upd.State, "agent update")
	default:
		legacyError(w, fmt.Errorf("invalid agent state %q", upd.State))
		return
	}
	s.maybeAdvanceLocked()
	w.WriteHeader(http.StatusOK)
}

// poolView counts a pool's agents (not closed) and live sessions (not closed).
func (s *Sim) poolViewLocked(p *pool) Pool {
	v := Pool{ID: p.id, Name: p.name, UserCount: 1}
	for _, a := range p.agents {
		if a.state != juiceapi.AgentClosed {
			v.AgentCount++
		}
	}
	for _, ss := range s.order {
		if ss.req.PoolID == p.id && ss.state != juiceapi.StateClosed {
			v.SessionCount++
		}
	}
	return v
}

// handleCreatePool creates a pool whose id is its name, so users can type it (--juice-pool=NAME).
func (s *Sim) handleCreatePool(w http.ResponseWriter, r *http.Request) {
	var in CreatePoolParams
	if err := decodeBody(r, &in); err != nil {
		legacyError(w, err)
		return
	}
	if in.Name == "" {
		legacyError(w, errors.New("invalid pool: name is empty"))
		return
	}
	defer s.lockAndStep()()
	if _, dup := s.poolIDLocked(in.Name); dup {
		legacyError(w, fmt.Errorf("pool %s already exists", in.Name))
		return
	}
	p := s.addPoolLocked(in.Name)
	s.log.Info("pool created", "pool", p.id)
	writeJSON(w, s.poolViewLocked(p))
}

func (s *Sim) handleGetPool(w http.ResponseWriter, r *http.Request) {
	defer s.lockAndStep()()
	p, ok := s.pools[r.PathValue("id")]
	if !ok {
		legacyError(w, fmt.Errorf("pool %s %w", r.PathValue("id"), errNotFound))
		return
	}
	writeJSON(w, s.poolViewLocked(p))
}

func (s *Sim) handleListPools(w http.ResponseWriter, r *http.Request) {
	if s.legacy.PoolUUIDs {
		http.NotFound(w, r) // the legacy router has no such route
		return
	}
	defer s.lockAndStep()()
	out := []Pool{}
	for _, id := range s.poolOrder {
		out = append(out, s.poolViewLocked(s.pools[id]))
	}
	writeJSON(w, out)
}

// handleDeletePool deletes an empty pool; one with agents or open sessions is refused, so nothing
// is orphaned.
func (s *Sim) handleDeletePool(w http.ResponseWriter, r *http.Request) {
	defer s.lockAndStep()()
	id := r.PathValue("id")
	p, ok := s.pools[id]
	if !ok {
		legacyError(w, fmt.Errorf("pool %s %w", id, errNotFound))
		return
	}
	v := s.poolViewLocked(p)
	if v.AgentCount > 0 || v.SessionCount > 0 {
		legacyError(w, fmt.Errorf("pool %s still has %d agents and %d open sessions", id, v.AgentCount, v.SessionCount))
		return
	}
	delete(s.pools, id)
	s.poolOrder = removeString(s.poolOrder, id)
	s.log.Info("pool deleted", "pool", id)
	writeJSON(w, v)
}

func removeString(list []string, x string) []string {
	for i, v := range list {
		if v == x {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}
