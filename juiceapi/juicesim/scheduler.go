package juicesim

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// The scheduler state. Everything here is guarded by Sim.mu.

type pool struct {
	id     string
	name   string   // what users type; the id too unless Legacy.PoolUUIDs
	agents []*agent // first fit walks them in this order
}

type agent struct {
	id, hostname, address, poolID, state, version string
	labels, taints                                map[string]string
	gpus                                          []*gpu
	sessions                                      []*session // assigned, active or canceling here
	registered                                    bool       // through the API: may time out
	lastSeen                                      time.Time
}

type gpu struct {
	index      int
	uuid, name string
	vram, used uint64
}

type session struct {
	id, key, state string
	req            juiceapi.SessionRequirements
	agent          *agent
	grants         []grant
	created, since time.Time
}

// grant is VRAM of one GPU held by a session; a whole-GPU request holds all of it.
type grant struct {
	gpu   *gpu
	bytes uint64
}

var errNotFound = errors.New("not found")

// NoCapacityPrefix starts the 500 text of a request that can never fit its pool; the client maps
// it to juiceapi.ErrNoCapacity.
const NoCapacityPrefix = "no capacity: "

// requestLocked creates a queued session, or returns the session already booked with key.
func (s *Sim) requestLocked(key string, req juiceapi.SessionRequirements) (string, error) {
	if key != "" && !s.legacy.IgnoreIdempotencyKey {
		if old, ok := s.keys[key]; ok {
			if old.req.PoolID != req.PoolID || len(old.req.GPUs) != len(req.GPUs) {
				s.log.Info("idempotency key reused with other requirements: answering with the first session",
					"key", key, "session", old.id)
			}
			return old.id, nil
		}
	}
	if s.legacy.PoolUUIDs {
		if _, ok := s.pools[req.PoolID]; !ok {
			// The legacy insert fails on the pool's foreign key and the error is dropped: an id for nothing.
			phantom := uuid.NewString()
			s.log.Info("phantom session: unknown pool id", "pool", req.PoolID, "session", phantom)
			return phantom, nil
		}
	}
	if !s.legacy.CrashOnNeverFit {
		if err := validateRequirements(req); err != nil {
			return "", err
		}
		if err := s.everFitsLocked(req); err != nil {
			return "", err
		}
	}
	now := s.now()
	ss := &session{id: uuid.NewString(), key: key, state: juiceapi.StateQueued, req: req, created: now, since: now}
	s.sessions[ss.id] = ss
	s.order = append(s.order, ss)
	s.queue = append(s.queue, ss)
	if key != "" && !s.legacy.IgnoreIdempotencyKey {
		s.keys[key] = ss
	}
	s.dirty = true
	s.log.Info("session queued", "session", ss.id, "pool", req.PoolID, "gpus", len(req.GPUs),
		"vram", describeVRAM(req.GPUs), "key", key)
	s.maybeAdvanceLocked()
	return ss.id, nil
}

func validateRequirements(req juiceapi.SessionRequirements) error {
	switch {
	case req.PoolID == "":
		return errors.New("invalid session requirements: poolId is empty")
	case len(req.GPUs) == 0:
		return errors.New("invalid session requirements: no GPUs requested")
	}
	return nil
}

// everFitsLocked refuses a request that no agent of its pool could hold even when idle, because
// such a request would otherwise wait in the queue forever.
func (s *Sim) everFitsLocked(req juiceapi.SessionRequirements) error {
	p, ok := s.pools[req.PoolID]
	if !ok {
		return fmt.Errorf("%spool %q does not exist", NoCapacityPrefix, req.PoolID)
	}
	maxGPUs, maxVRAM := 0, uint64(0)
	for _, a := range p.agents {
		if a.state == juiceapi.AgentClosed {
			continue
		}
		maxGPUs = max(maxGPUs, len(a.gpus))
		for _, g := range a.gpus {
			maxVRAM = max(maxVRAM, g.vram)
		}
		if matches(a, req) && fit(a, req.GPUs, true) != nil {
			return nil
		}
	}
	extra := ""
	if len(req.MatchLabels) > 0 || len(req.Tolerates) > 0 {
		extra = fmt.Sprintf(" with labels %v and tolerations %v", req.MatchLabels, req.Tolerates)
	}
	return fmt.Errorf("%sno agent in pool %q%s can ever fit %d GPU(s) x %s (largest agent: %d GPUs, largest GPU: %s)",
		NoCapacityPrefix, req.PoolID, extra, len(req.GPUs), describeVRAM(req.GPUs), maxGPUs, vram.Format(maxVRAM))
}

func describeVRAM(reqs []juiceapi.GPURequirements) string {
	seen := map[uint64]bool{}
	var parts []string
	for _, r := range reqs {
		if !seen[r.VRAMRequired] {
			seen[r.VRAMRequired] = true
			if r.VRAMRequired == 0 {
				parts = append(parts, "whole GPU")
			} else {
				parts = append(parts, vram.Format(r.VRAMRequired))
			}
		}
	}
	return strings.Join(parts, "/")
}

// matches: the agent is in the pool, carries every wanted label, and every taint is tolerated.
func matches(a *agent, req juiceapi.SessionRequirements) bool {
	if a.poolID != req.PoolID {
		return false
	}
	for k, v := range req.MatchLabels {
		if got, ok := a.labels[k]; !ok || got != v {
			return false
		}
	}
	for k, v := range a.taints {
		if got, ok := req.Tolerates[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// fit finds one distinct GPU per requirement on the agent, first fit in index order. A requirement
// of 0 bytes wants a whole, untouched GPU; a slice wants that much free VRAM and may share a GPU
// with other sessions' slices. idle pretends nothing is allocated (for "can it ever fit").
func fit(a *agent, reqs []juiceapi.GPURequirements, idle bool) []grant {
	return fitProfile(a, reqs, idle, false)
}

// fitProfile is fit, or with wholeAgent (Legacy.WholeAgentGrant) the legacy placement of whole-GPU requests:
// an agent with at least as many GPUs gives every one of them, in reverse order, and keeps none back.
func fitProfile(a *agent, reqs []juiceapi.GPURequirements, idle, wholeAgent bool) []grant {
	if wholeAgent && len(reqs) > 0 && allWhole(reqs) {
		if len(a.gpus) < len(reqs) {
			return nil
		}
		grants := make([]grant, 0, len(a.gpus))
		for i := len(a.gpus) - 1; i >= 0; i-- {
			grants = append(grants, grant{a.gpus[i], 0})
		}
		return grants
	}
	taken := make([]bool, len(a.gpus))
	grants := make([]grant, 0, len(reqs))
	for _, r := range reqs {
		found := false
		for i, g := range a.gpus {
			used := g.used
			if idle {
				used = 0
			}
			if taken[i] {
				continue
			}
			if r.VRAMRequired == 0 && used == 0 {
				grants = append(grants, grant{g, g.vram})
			} else if r.VRAMRequired != 0 && g.vram-used >= r.VRAMRequired {
				grants = append(grants, grant{g, r.VRAMRequired})
			} else {
				continue
			}
			taken[i], found = true, true
			break
		}
		if !found {
			return nil
		}
	}
	return grants
}

// maybeAdvanceLocked runs the scheduler at once in instant mode (Tick == 0).
func (s *Sim) maybeAdvanceLocked() {
	if s.tick == 0 {
		s.advanceLocked()
	}
}

// advanceLocked is one scheduler pass: time out agents, finish cancels (freeing VRAM first so the
// queue can use it), assign queued sessions first fit in arrival order, activate assigned ones.
func (s *Sim) advanceLocked() {
	now := s.now()
	if s.agentTimeout > 0 {
		for _, a := range s.agentList {
			if a.registered && a.state != juiceapi.AgentMissing && a.state != juiceapi.AgentClosed &&
				now.Sub(a.lastSeen) >= s.agentTimeout {
				s.setAgentStateLocked(a, juiceapi.AgentMissing, "no heartbeat")
			}
		}
	}
	for _, ss := range s.movingLocked() {
		if ss.state == juiceapi.StateCanceling && now.Sub(ss.since) >= s.cancelDelay {
			s.closeLocked(ss, "cancelled")
		}
	}
	if s.dirty || s.assignDelay > 0 {
		s.dirty = false
		s.scheduleLocked(now)
	}
	for _, ss := range s.movingLocked() {
		if ss.state == juiceapi.StateAssigned && now.Sub(ss.since) >= s.activateDelay {
			ss.state, ss.since = juiceapi.StateActive, now
			delete(s.moving, ss)
			s.log.Info("session active", "session", ss.id, "agent", ss.agent.id)
		}
	}
}

// movingLocked lists the sessions a pass may move on, in the order they got their state (then by id), as the
// agents' lists gave them before.
func (s *Sim) movingLocked() []*session {
	out := make([]*session, 0, len(s.moving))
	for ss := range s.moving {
		out = append(out, ss)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].since.Equal(out[j].since) {
			return out[i].since.Before(out[j].since)
		}
		return out[i].id < out[j].id
	})
	return out
}

func allWhole(reqs []juiceapi.GPURequirements) bool {
	for _, r := range reqs {
		if r.VRAMRequired != 0 {
			return false
		}
	}
	return true
}

func (s *Sim) scheduleLocked(now time.Time) {
	kept := s.queue[:0]
	for _, ss := range s.queue {
		if ss.state != juiceapi.StateQueued {
			continue // cancelled while queued
		}
		if s.legacy.CrashOnNeverFit && s.crashed == "" {
			if why := s.neverFitsActiveLocked(ss.req); why != "" {
				s.crashed = why
				s.log.Info("the controller exits (legacy)", "session", ss.id, "reason", why)
			}
		}
		if now.Sub(ss.created) < s.assignDelay || !s.assignLocked(ss, now) {
			kept = append(kept, ss)
		}
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// neverFitsActiveLocked is the legacy controller's exit: a queued session that no active agent of its pool can
// fit even idle (while the pool has an active agent at all), or one for no GPU.
func (s *Sim) neverFitsActiveLocked(req juiceapi.SessionRequirements) string {
	if len(req.GPUs) == 0 {
		return "session must request at least one GPU"
	}
	p := s.pools[req.PoolID]
	if p == nil {
		return ""
	}
	active := false
	for _, a := range p.agents {
		if a.state != juiceapi.AgentActive {
			continue
		}
		active = true
		if matches(a, req) && fitProfile(a, req.GPUs, true, s.legacy.WholeAgentGrant) != nil {
			return ""
		}
	}
	if !active {
		return ""
	}
	return "unable to find a matching set of GPUs"
}

func (s *Sim) assignLocked(ss *session, now time.Time) bool {
	p := s.pools[ss.req.PoolID]
	if p == nil {
		return false
	}
	for _, a := range p.agents {
		if a.state != juiceapi.AgentActive || !matches(a, ss.req) {
			continue
		}
		grants := fitProfile(a, ss.req.GPUs, false, s.legacy.WholeAgentGrant)
		if grants == nil {
			continue
		}
		for _, g := range grants {
			g.gpu.used += g.bytes
		}
		ss.agent, ss.grants = a, grants
		ss.state, ss.since = juiceapi.StateAssigned, now
		s.moving[ss] = struct{}{}
		a.sessions = append(a.sessions, ss)
		s.log.Info("session assigned", "session", ss.id, "agent", a.id, "address", a.address, "gpus", gpuIndexes(grants))
		return true
	}
	return false
}

func gpuIndexes(gs []grant) []int {
	out := make([]int, len(gs))
	for i, g := range gs {
		out[i] = g.gpu.index
	}
	return out
}

// closeLocked ends a session and returns its VRAM.
func (s *Sim) closeLocked(ss *session, why string) {
	if ss.state == juiceapi.StateClosed {
		return
	}
	for _, g := range ss.grants {
		g.gpu.used -= g.bytes
	}
	if a := ss.agent; a != nil {
		a.sessions = removeSession(a.sessions, ss)
	}
	ss.state, ss.since = juiceapi.StateClosed, s.now()
	delete(s.moving, ss)
	s.dirty = true // freed VRAM may let a queued session in
	s.log.Info("session closed", "session", ss.id, "reason", why)
}

func removeSession(list []*session, ss *session) []*session {
	for i, x := range list {
		if x == ss {
			return append(list[:i], list[i+1:]...)
		}
	}
	return list
}

// cancelLocked is DELETE /v1/session/{id}: closed at once when no agent holds it, otherwise
// canceling until the agent has torn it down. Cancelling an ended session is a no-op.
func (s *Sim) cancelLocked(id string) error {
	ss, ok := s.sessions[id]
	if !ok {
		return fmt.Errorf("session %s %w", id, errNotFound)
	}
	switch ss.state {
	case juiceapi.StateClosed:
		if s.legacy.CancelReopens && ss.agent != nil {
			ss.state, ss.since = juiceapi.StateCanceling, s.now()
			s.reopened++
			s.log.Info("closed session reopened as canceling by a cancel (legacy): a real agent exits now", "session", ss.id)
		}
	case juiceapi.StateQueued:
		s.closeLocked(ss, "cancelled while queued")
	case juiceapi.StateAssigned, juiceapi.StateActive:
		if ss.state == juiceapi.StateAssigned && s.legacy.CancelBeforeActiveKillsAgent && ss.agent != nil {
			s.agentsKilled++
			s.log.Info("cancel of a session its agent has not taken: the agent exits (legacy)", "session", ss.id, "agent", ss.agent.id)
			s.setAgentStateLocked(ss.agent, juiceapi.AgentMissing, "exited: unable to cancel session")
		}
		ss.state, ss.since = juiceapi.StateCanceling, s.now()
		if ss.agent != nil {
			s.moving[ss] = struct{}{}
		}
		s.log.Info("session canceling", "session", ss.id)
	}
	s.maybeAdvanceLocked()
	return nil
}

// setAgentStateLocked changes an agent's state. A missing or closed agent's sessions end at once
// (as with the legacy controller: the agent is gone, so are its sessions) and their VRAM is freed;
// a disabled agent keeps its sessions but gets no new ones.
func (s *Sim) setAgentStateLocked(a *agent, state, why string) {
	if a.state == state {
		return
	}
	s.log.Info("agent state", "agent", a.id, "pool", a.poolID, "from", a.state, "to", state, "reason", why)
	a.state = state
	if state == juiceapi.AgentMissing && s.legacy.MissingKeepsSessions {
		s.dirty = true
		return // legacy: they stay active for ever
	}
	if state == juiceapi.AgentMissing || state == juiceapi.AgentClosed {
		for _, ss := range append([]*session(nil), a.sessions...) {
			s.closeLocked(ss, "agent "+state)
		}
	}
	s.dirty = true
}

// view is the wire form of a session.
func (ss *session) view() juiceapi.Session {
	v := juiceapi.Session{
		ID: ss.id, State: ss.state, Version: ss.req.Version, PoolID: ss.req.PoolID,
		GPUs: []juiceapi.SessionGPU{}, Connections: []juiceapi.Connection{}, IdempotencyKey: ss.key,
	}
	if ss.agent != nil {
		v.Address = ss.agent.address
	}
	for _, g := range ss.grants {
		v.GPUs = append(v.GPUs, juiceapi.SessionGPU{Index: g.gpu.index, VRAMRequired: g.bytes})
	}
	return v
}

// wire is a session as GET /v1/session/{id} shows it under the simulator's profile.
func (s *Sim) wireSessionLocked(ss *session) juiceapi.Session {
	if s.legacy.EmptyQueuedRead && (ss.state == juiceapi.StateQueued || ss.state == juiceapi.StateClosed && ss.agent == nil) {
		return juiceapi.Session{} // the legacy read of a session without GPUs fails to decode and answers zero
	}
	v := ss.view()
	if s.legacy.IgnoreIdempotencyKey {
		v.IdempotencyKey = ""
	}
	return v
}

// wireAgentLocked is an agent as GET /v1/agent/{id} shows it (listing false) or GET /v1/agents (listing true).
func (s *Sim) wireAgentLocked(a *agent, listing bool) juiceapi.Agent {
	v := a.view()
	if listing && s.legacy.NoSessionListing {
		v.Sessions = []juiceapi.Session{}
		return v
	}
	for i, ss := range a.sessions {
		v.Sessions[i] = s.wireSessionLocked(ss)
	}
	return v
}

func (a *agent) view() juiceapi.Agent {
	v := juiceapi.Agent{
		ID: a.id, State: a.state, Hostname: a.hostname, Address: a.address, Version: a.version,
		PoolID: a.poolID, Labels: maps.Clone(a.labels), Taints: maps.Clone(a.taints),
		GPUs: []juiceapi.GPU{}, Sessions: []juiceapi.Session{},
	}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	if v.Taints == nil {
		v.Taints = map[string]string{}
	}
	for _, g := range a.gpus {
		v.GPUs = append(v.GPUs, juiceapi.GPU{Index: g.index, UUID: g.uuid, Name: g.name, Vendor: "Simulated",
			Model: g.name, VRAM: g.vram, PCIBus: fmt.Sprintf("0000:%02x:00.0", g.index+1)})
	}
	for _, ss := range a.sessions {
		v.Sessions = append(v.Sessions, ss.view())
	}
	return v
}

// checkLocked verifies the bookkeeping: what every GPU has handed out equals what live sessions
// hold and never exceeds the GPU; a session's GPUs are distinct and on its one agent; ended and
// queued sessions hold nothing.
func (s *Sim) checkLocked() error {
	if s.reopened > 0 {
		return fmt.Errorf("%d closed session(s) reopened by a cancel", s.reopened)
	}
	if s.agentsKilled > 0 {
		return fmt.Errorf("%d agent(s) exited on a cancel of a session they had not taken", s.agentsKilled)
	}
	held := map[*gpu]uint64{}
	for _, ss := range s.order {
		live := ss.state == juiceapi.StateAssigned || ss.state == juiceapi.StateActive || ss.state == juiceapi.StateCanceling
		if !live {
			if ss.state == juiceapi.StateClosed {
				continue // closed sessions keep their grants for the record, but they were returned
			}
			if len(ss.grants) != 0 {
				return fmt.Errorf("%s session %s holds GPUs", ss.state, ss.id)
			}
			continue
		}
		whole := s.legacy.WholeAgentGrant && allWhole(ss.req.GPUs)
		if ss.agent == nil || len(ss.grants) != len(ss.req.GPUs) && !whole {
			return fmt.Errorf("session %s: %d grants for %d GPUs", ss.id, len(ss.grants), len(ss.req.GPUs))
		}
		seen := map[*gpu]bool{}
		for i, g := range ss.grants {
			if seen[g.gpu] {
				return fmt.Errorf("session %s holds GPU %d twice", ss.id, g.gpu.index)
			}
			seen[g.gpu] = true
			if !ss.agent.owns(g.gpu) {
				return fmt.Errorf("session %s spans agents (GPU %d not on %s)", ss.id, g.gpu.index, ss.agent.id)
			}
			want := uint64(0)
			if !whole {
				want = ss.req.GPUs[i].VRAMRequired
			}
			if !whole && (want == 0 && g.bytes != g.gpu.vram || want != 0 && g.bytes != want) {
				return fmt.Errorf("session %s GPU %d: granted %d bytes for %d wanted", ss.id, g.gpu.index, g.bytes, want)
			}
			held[g.gpu] += g.bytes
		}
		if !containsSession(ss.agent.sessions, ss) {
			return fmt.Errorf("session %s is not listed on agent %s", ss.id, ss.agent.id)
		}
	}
	for _, a := range s.agentList {
		for _, g := range a.gpus {
			if g.used > g.vram {
				return fmt.Errorf("agent %s GPU %d: %d bytes handed out of %d", a.id, g.index, g.used, g.vram)
			}
			if held[g] != g.used {
				return fmt.Errorf("agent %s GPU %d: used %d but sessions hold %d", a.id, g.index, g.used, held[g])
			}
		}
		for _, ss := range a.sessions {
			if ss.agent != a || ss.state == juiceapi.StateClosed || ss.state == juiceapi.StateQueued {
				return fmt.Errorf("agent %s lists %s session %s", a.id, ss.state, ss.id)
			}
		}
	}
	return nil
}

func (a *agent) owns(g *gpu) bool {
	for _, x := range a.gpus {
		if x == g {
			return true
		}
	}
	return false
}

func containsSession(list []*session, ss *session) bool {
	for _, x := range list {
		if x == ss {
			return true
		}
	}
	return false
}
