// Package juiceport adapts a juiceapi.Client to reconcile.Juice, the port through which the domain talks to the
// Juice Controller: it turns a run's request into the wire request, a wire session into the domain's (judged
// against the request with juiceapi's grant check), a pool walk into a reconcile.PoolView, and juiceapi's error
// kinds into the port's. It is the one place that knows both sides; the controller wires it.
package juiceport

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// Port is a juiceapi.Client as a reconcile.Juice.
type Port struct {
	Client juiceapi.Client
}

var _ reconcile.Juice = Port{}

// New returns c as the domain's port.
func New(c juiceapi.Client) Port { return Port{Client: c} }

// SessionRequest is what the Juice Controller is asked for req.
func SessionRequest(req request.Request) juiceapi.SessionRequest {
	return juiceapi.SessionRequest{PoolID: req.Pool, GPUs: req.GPUs, VRAMPerGPU: req.VRAM}
}

// RequestSession implements reconcile.Juice.
func (p Port) RequestSession(ctx context.Context, key uuid.UUID, req request.Request) (string, error) {
	id, err := p.Client.RequestSession(ctx, key, SessionRequest(req))
	return id, kind(err)
}

// GetSession implements reconcile.Juice: the session, with the GPUs of it that serve req and, when it is active,
// why it does not (juiceapi.GrantedGPUs, juiceapi.CheckGrant).
func (p Port) GetSession(ctx context.Context, id string, req request.Request) (reconcile.Session, error) {
	s, err := p.Client.GetSession(ctx, id)
	if err != nil {
		return reconcile.Session{}, kind(err)
	}
	out := session(s)
	wire := SessionRequest(req)
	out.GPUs = juiceapi.GrantedGPUs(s, wire)
	if s.Active() {
		out.Unfit = juiceapi.CheckGrant(s, wire)
	}
	return out, nil
}

// CancelSession implements reconcile.Juice.
func (p Port) CancelSession(ctx context.Context, id string) error {
	return kind(p.Client.CancelSession(ctx, id))
}

// WalkPool implements reconcile.PoolWalker with juiceapi.WalkPool.
func (p Port) WalkPool(ctx context.Context, pool string, now time.Time) (reconcile.PoolView, error) {
	v, err := juiceapi.WalkPool(ctx, p.Client, pool, now)
	if err != nil {
		return nil, kind(err)
	}
	return view{v}, nil
}

// session is s in the domain's words: its phase decided by juiceapi's own Active and Ended.
func session(s *juiceapi.Session) reconcile.Session {
	out := reconcile.Session{ID: s.ID, Key: s.Key(), State: s.State, Address: s.Address}
	switch {
	case s.Active():
		out.Phase = reconcile.SessionActive
	case s.Ended():
		out.Phase = reconcile.SessionEnded
	case s.State == juiceapi.StateAssigned:
		out.Phase = reconcile.SessionAssigned
	default:
		out.Phase = reconcile.SessionQueued
	}
	return out
}

func agent(a *juiceapi.Agent) reconcile.Agent {
	return reconcile.Agent{ID: a.ID, Address: a.Address, State: a.State, Active: a.State == juiceapi.AgentActive}
}

// view is a juiceapi.PoolView as a reconcile.PoolView; it converts only what is asked of it.
type view struct{ v *juiceapi.PoolView }

func (w view) Taken() time.Time { return w.v.Taken }
func (w view) Whole() bool      { return w.v.Whole() }

func (w view) ByKey(key string) []reconcile.Held {
	var out []reconcile.Held
	sessions, agents := w.v.ByKey(key)
	for i := range sessions {
		out = append(out, reconcile.Held{Session: session(&sessions[i]), Agent: reconcile.Agent{ID: agents[i]}})
	}
	return out
}

func (w view) Find(id string) (reconcile.Held, bool) {
	s, a := w.v.Find(id)
	if s == nil {
		return reconcile.Held{}, false
	}
	return reconcile.Held{Session: session(s), Agent: agent(a)}, true
}

func (w view) Keyed() []reconcile.Held {
	var out []reconcile.Held
	for i := range w.v.Agents {
		a := &w.v.Agents[i]
		for j := range a.Sessions {
			if s := &a.Sessions[j]; s.Key() != "" && !s.Ended() && s.ID != "" {
				out = append(out, reconcile.Held{Session: session(s), Agent: agent(a)})
			}
		}
	}
	return out
}

func (w view) AgentAt(address string) (reconcile.Agent, bool) {
	a := w.v.AgentAt(address)
	if a == nil {
		return reconcile.Agent{}, false
	}
	return agent(a), true
}

// kinds maps juiceapi's error kinds to the port's.
var kinds = []struct{ wire, port error }{
	{juiceapi.ErrNotFound, reconcile.ErrNoSession},
	{juiceapi.ErrNoCapacity, reconcile.ErrNeverFits},
	{juiceapi.ErrInvalidRequest, reconcile.ErrRefused},
	{juiceapi.ErrNotYet, reconcile.ErrNotYet},
}

// kind gives err the port's kind when it has one of juiceapi's, keeping err in the chain and its text as is
// (it ends up in reservations' reasons).
func kind(err error) error {
	if err == nil {
		return nil
	}
	for _, k := range kinds {
		if errors.Is(err, k.wire) {
			return &kindError{kind: k.port, err: err}
		}
	}
	return err
}

type kindError struct{ kind, err error }

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
