package controller

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// instrumentedJuice times every call to the Juice Controller.
type instrumentedJuice struct {
	juiceapi.Client
	m *Metrics
}

// InstrumentJuice wraps c so that each call is counted and timed in m.
func InstrumentJuice(c juiceapi.Client, m *Metrics) juiceapi.Client {
	if m == nil {
		return c
	}
	return instrumentedJuice{c, m}
}

func (i instrumentedJuice) RequestSession(ctx context.Context, key uuid.UUID, req juiceapi.SessionRequest) (string, error) {
	start := time.Now()
	id, err := i.Client.RequestSession(ctx, key, req)
	i.m.observeJuice("request_session", start, err)
	return id, err
}

func (i instrumentedJuice) GetSession(ctx context.Context, id string) (*juiceapi.Session, error) {
	start := time.Now()
	s, err := i.Client.GetSession(ctx, id)
	i.m.observeJuice("get_session", start, err)
	return s, err
}

func (i instrumentedJuice) CancelSession(ctx context.Context, id string) error {
	start := time.Now()
	err := i.Client.CancelSession(ctx, id)
	i.m.observeJuice("cancel_session", start, err)
	return err
}

func (i instrumentedJuice) ListAgents(ctx context.Context, pool string) ([]juiceapi.Agent, error) {
	start := time.Now()
	a, err := i.Client.ListAgents(ctx, pool)
	i.m.observeJuice("list_agents", start, err)
	return a, err
}

func (i instrumentedJuice) GetAgent(ctx context.Context, id string) (*juiceapi.Agent, error) {
	start := time.Now()
	a, err := i.Client.GetAgent(ctx, id)
	i.m.observeJuice("get_agent", start, err)
	return a, err
}
