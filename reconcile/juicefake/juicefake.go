// Package juicefake is an in-memory Juice Controller behind reconcile.Juice, for tests of the Reconciler that
// need no simulator. Like the legacy controller it has no idempotency: every request books a session, and a run's
// sessions are found again by their key in a walk of the pool. A test moves sessions along (Place, Activate, End)
// and adds agents; Intercept wraps any reconcile.Juice with interceptors, in the manner of controller-runtime's
// interceptor client, to inject errors or lose an answer.
package juicefake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// Session is a session of the fake controller.
type Session struct {
	reconcile.Session
	Key     uuid.UUID
	Request request.Request
	Agent   string // the id of the agent holding it; "" while queued
}

// Juice is the fake controller. Its zero value has no agent and no session.
type Juice struct {
	// Partial makes every walk say it may not have seen every agent (PoolView.Whole false), as a legacy
	// controller's listing cut at one page does.
	Partial bool

	mu       sync.Mutex
	agents   map[string][]reconcile.Agent // by pool
	sessions map[string]*Session
	order    []string // session ids, as booked
	calls    Calls
}

// Calls counts what was asked of the controller.
type Calls struct {
	Requests, Gets, Cancels, Walks int
	// Cancelled are the ids of the sessions cancelled, in order.
	Cancelled []string
}

var _ reconcile.Juice = (*Juice)(nil)

// AddAgent adds an agent to pool (Active when its state is "active").
func (j *Juice) AddAgent(pool string, a reconcile.Agent) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.agents == nil {
		j.agents = map[string][]reconcile.Agent{}
	}
	j.agents[pool] = append(j.agents[pool], a)
}

// SetAgent changes the state of the agent id of pool.
func (j *Juice) SetAgent(pool, id, state string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := range j.agents[pool] {
		if j.agents[pool][i].ID == id {
			j.agents[pool][i].State, j.agents[pool][i].Active = state, state == "active"
		}
	}
}

// Book adds a session under key as if a request had reached the controller, and returns its id; uuid.Nil books
// one that carries no key.
func (j *Juice) Book(key uuid.UUID, req request.Request) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.book(key, req)
}

func (j *Juice) book(key uuid.UUID, req request.Request) string {
	if j.sessions == nil {
		j.sessions = map[string]*Session{}
	}
	id := fmt.Sprintf("s%d", len(j.order)+1)
	s := &Session{Session: reconcile.Session{ID: id, State: "queued", Phase: reconcile.SessionQueued}, Key: key, Request: req}
	if key != uuid.Nil { // uuid.Nil: booked by a client that sends no key
		s.Session.Key = key.String()
	}
	j.sessions[id] = s
	j.order = append(j.order, id)
	return id
}

// Place assigns session id to agent of its pool.
func (j *Juice) Place(id, agent string) {
	j.set(id, func(s *Session) {
		s.Agent, s.State, s.Phase = agent, "assigned", reconcile.SessionAssigned
		s.Address = j.agentOf(s.Request.Pool, agent).Address
	})
}

// Activate makes session id active on agent with gpus, exactly what was asked when gpus is nil.
func (j *Juice) Activate(id, agent string, gpus []int) {
	j.set(id, func(s *Session) {
		if gpus == nil {
			for i := range s.Request.GPUs {
				gpus = append(gpus, i)
			}
		}
		s.Agent, s.State, s.Phase, s.GPUs = agent, "active", reconcile.SessionActive, gpus
		s.Address = j.agentOf(s.Request.Pool, agent).Address
	})
}

// Unfit makes an active session not serve what was asked, saying why.
func (j *Juice) Unfit(id, why string) { j.set(id, func(s *Session) { s.Unfit = why }) }

// End ends session id at the controller (closed).
func (j *Juice) End(id string) {
	j.set(id, func(s *Session) { s.State, s.Phase = "closed", reconcile.SessionEnded })
}

// Forget makes the controller no longer know session id.
func (j *Juice) Forget(id string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.sessions, id)
}

func (j *Juice) set(id string, f func(*Session)) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.sessions[id]
	if s == nil {
		panic("juicefake: no session " + id)
	}
	f(s)
}

func (j *Juice) agentOf(pool, id string) reconcile.Agent {
	for _, a := range j.agents[pool] {
		if a.ID == id {
			return a
		}
	}
	panic(fmt.Sprintf("juicefake: no agent %s in pool %s", id, pool))
}

// Sessions returns the sessions booked under key, as booked.
func (j *Juice) Sessions(key uuid.UUID) []Session {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []Session
	for _, id := range j.order {
		if s := j.sessions[id]; s != nil && s.Key == key {
			out = append(out, *s)
		}
	}
	return out
}

// Calls returns what was asked so far.
func (j *Juice) Calls() Calls {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.calls
	c.Cancelled = slices.Clone(c.Cancelled)
	return c
}

// RequestSession implements reconcile.Juice: a new queued session, every time.
func (j *Juice) RequestSession(_ context.Context, key uuid.UUID, req request.Request) (string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls.Requests++
	return j.book(key, req), nil
}

// GetSession implements reconcile.Juice; the fake judges no grant: GPUs and Unfit are what the test set.
func (j *Juice) GetSession(_ context.Context, id string, _ request.Request) (reconcile.Session, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls.Gets++
	s := j.sessions[id]
	if s == nil {
		return reconcile.Session{}, fmt.Errorf("session %s: %w", id, reconcile.ErrNoSession)
	}
	return s.Session, nil
}

// CancelSession implements reconcile.Juice as the Juice client does: an ended session is left alone, an assigned
// one cannot be cancelled yet.
func (j *Juice) CancelSession(_ context.Context, id string) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls.Cancels++
	s := j.sessions[id]
	switch {
	case s == nil:
		return fmt.Errorf("cancel session %s: %w", id, reconcile.ErrNoSession)
	case s.Ended():
		return nil
	case s.Phase == reconcile.SessionAssigned:
		return fmt.Errorf("cancel session %s: %w", id, reconcile.ErrNotYet)
	}
	s.State, s.Phase = "canceling", reconcile.SessionEnded
	j.calls.Cancelled = append(j.calls.Cancelled, id)
	return nil
}

// WalkPool implements reconcile.PoolWalker: the pool's agents and the sessions placed on them, as they are now;
// every pool's for pool "" (the sweep's walk).
func (j *Juice) WalkPool(_ context.Context, pool string, now time.Time) (reconcile.PoolView, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.calls.Walks++
	v := &view{taken: now, whole: !j.Partial}
	for p, agents := range j.agents {
		if pool == "" || p == pool {
			v.agents = append(v.agents, agents...)
		}
	}
	for _, id := range j.order {
		s := j.sessions[id]
		if s == nil || s.Agent == "" || (pool != "" && s.Request.Pool != pool) {
			continue
		}
		v.held = append(v.held, reconcile.Held{Session: s.Session, Agent: j.agentOf(s.Request.Pool, s.Agent)})
	}
	return v, nil
}

type view struct {
	taken  time.Time
	whole  bool
	agents []reconcile.Agent
	held   []reconcile.Held
}

func (v *view) Taken() time.Time { return v.taken }
func (v *view) Whole() bool      { return v.whole }

func (v *view) ByKey(key string) []reconcile.Held {
	var out []reconcile.Held
	for _, h := range v.held {
		if h.Session.Key == key && !h.Session.Ended() {
			out = append(out, h)
		}
	}
	return out
}

func (v *view) Keyed() []reconcile.Held {
	var out []reconcile.Held
	for _, h := range v.held {
		if h.Session.Key != "" && !h.Session.Ended() {
			out = append(out, h)
		}
	}
	return out
}

func (v *view) Find(id string) (reconcile.Held, bool) {
	for _, h := range v.held {
		if h.Session.ID == id {
			return h, true
		}
	}
	return reconcile.Held{}, false
}

func (v *view) AgentAt(address string) (reconcile.Agent, bool) {
	for i := len(v.agents) - 1; i >= 0; i-- {
		if v.agents[i].Address == address {
			return v.agents[i], true
		}
	}
	return reconcile.Agent{}, false
}

// Funcs are the interceptors of a reconcile.Juice: each one set is called instead of the method, with the Juice
// it wraps to call through to.
type Funcs struct {
	RequestSession func(ctx context.Context, next reconcile.Juice, key uuid.UUID, req request.Request) (string, error)
	GetSession     func(ctx context.Context, next reconcile.Juice, id string, req request.Request) (reconcile.Session, error)
	CancelSession  func(ctx context.Context, next reconcile.Juice, id string) error
	WalkPool       func(ctx context.Context, next reconcile.Juice, pool string, now time.Time) (reconcile.PoolView, error)
}

// Intercept returns next with the interceptors of f in front of it.
func Intercept(next reconcile.Juice, f Funcs) reconcile.Juice { return intercepted{next, f} }

type intercepted struct {
	next reconcile.Juice
	f    Funcs
}

func (i intercepted) RequestSession(ctx context.Context, key uuid.UUID, req request.Request) (string, error) {
	if i.f.RequestSession != nil {
		return i.f.RequestSession(ctx, i.next, key, req)
	}
	return i.next.RequestSession(ctx, key, req)
}

func (i intercepted) GetSession(ctx context.Context, id string, req request.Request) (reconcile.Session, error) {
	if i.f.GetSession != nil {
		return i.f.GetSession(ctx, i.next, id, req)
	}
	return i.next.GetSession(ctx, id, req)
}

func (i intercepted) CancelSession(ctx context.Context, id string) error {
	if i.f.CancelSession != nil {
		return i.f.CancelSession(ctx, i.next, id)
	}
	return i.next.CancelSession(ctx, id)
}

func (i intercepted) WalkPool(ctx context.Context, pool string, now time.Time) (reconcile.PoolView, error) {
	if i.f.WalkPool != nil {
		return i.f.WalkPool(ctx, i.next, pool, now)
	}
	return i.next.WalkPool(ctx, pool, now)
}
