package controller

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// observedJuice hands every call to the Juice Controller, with when it started and how it ended, to observe: the
// one wrapper of the client, through which the metrics time each call and the leader's health notes whether the
// Juice Controller can be reached.
type observedJuice struct {
	juiceapi.Client
	observe func(op string, start time.Time, err error)
}

func (o observedJuice) RequestSession(ctx context.Context, key uuid.UUID, req juiceapi.SessionRequest) (string, error) {
	start := time.Now()
	id, err := o.Client.RequestSession(ctx, key, req)
	o.observe("request_session", start, err)
	return id, err
}

func (o observedJuice) GetSession(ctx context.Context, id string) (*juiceapi.Session, error) {
	start := time.Now()
	s, err := o.Client.GetSession(ctx, id)
	o.observe("get_session", start, err)
	return s, err
}

func (o observedJuice) CancelSession(ctx context.Context, id string) error {
	start := time.Now()
	err := o.Client.CancelSession(ctx, id)
	o.observe("cancel_session", start, err)
	return err
}

func (o observedJuice) ListAgents(ctx context.Context, pool string) ([]juiceapi.Agent, error) {
	start := time.Now()
	a, err := o.Client.ListAgents(ctx, pool)
	o.observe("list_agents", start, err)
	return a, err
}

func (o observedJuice) GetAgent(ctx context.Context, id string) (*juiceapi.Agent, error) {
	start := time.Now()
	a, err := o.Client.GetAgent(ctx, id)
	o.observe("get_agent", start, err)
	return a, err
}
