package juiceport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/juiceport"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// stub is a juiceapi.Client answering from its fields.
type stub struct {
	sessions map[string]*juiceapi.Session
	agents   []juiceapi.Agent
	err      error // every call's, when set
	asked    []juiceapi.SessionRequest
}

func (s *stub) RequestSession(_ context.Context, _ uuid.UUID, req juiceapi.SessionRequest) (string, error) {
	s.asked = append(s.asked, req)
	return "s1", s.err
}

func (s *stub) GetSession(_ context.Context, id string) (*juiceapi.Session, error) {
	if s.err != nil {
		return nil, s.err
	}
	return s.sessions[id], nil
}

func (s *stub) CancelSession(context.Context, string) error { return s.err }

func (s *stub) ListAgents(context.Context, string) ([]juiceapi.Agent, error) { return s.agents, s.err }

func (s *stub) GetAgent(_ context.Context, id string) (*juiceapi.Agent, error) {
	for i := range s.agents {
		if s.agents[i].ID == id {
			return &s.agents[i], nil
		}
	}
	return nil, juiceapi.ErrNotFound
}

func (s *stub) Status(context.Context) (*juiceapi.Status, error) { return &juiceapi.Status{}, nil }

var ctx = context.Background()

func TestRequestIsTheWireRequest(t *testing.T) {
	c := &stub{}
	_, err := juiceport.New(c).RequestSession(ctx, uuid.New(), request.Request{Pool: "test", GPUs: 2, VRAM: 1 << 30})
	require.NoError(t, err)
	assert.Equal(t, []juiceapi.SessionRequest{{PoolID: "test", GPUs: 2, VRAMPerGPU: 1 << 30}}, c.asked)
}

func TestSessionsInTheDomainsWords(t *testing.T) {
	c := &stub{sessions: map[string]*juiceapi.Session{
		"queued":    {ID: "queued", State: juiceapi.StateQueued},
		"empty":     {}, // the legacy controller's answer for a queued session
		"assigned":  {ID: "assigned", State: juiceapi.StateAssigned},
		"canceling": {ID: "canceling", State: juiceapi.StateCanceling},
		"closed":    {ID: "closed", State: juiceapi.StateClosed},
		"serves": {ID: "serves", State: juiceapi.StateActive, Address: "a:1",
			GPUs: []juiceapi.SessionGPU{{Index: 3}, {Index: 1}, {Index: 0}}},
		"short": {ID: "short", State: juiceapi.StateActive, Address: "a:1", GPUs: []juiceapi.SessionGPU{{Index: 0}}},
	}}
	p := juiceport.New(c)
	req := request.Request{Pool: "test", GPUs: 2}
	for id, want := range map[string]reconcile.Phase{
		"queued": reconcile.SessionQueued, "empty": reconcile.SessionQueued, "assigned": reconcile.SessionAssigned,
		"canceling": reconcile.SessionEnded, "closed": reconcile.SessionEnded, "serves": reconcile.SessionActive,
	} {
		s, err := p.GetSession(ctx, id, req)
		require.NoError(t, err)
		assert.Equal(t, want, s.Phase, id)
	}
	s, err := p.GetSession(ctx, "serves", req)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1}, s.GPUs, "exactly what was asked, lowest first")
	assert.Empty(t, s.Unfit)
	s, err = p.GetSession(ctx, "short", req)
	require.NoError(t, err)
	assert.Equal(t, juiceapi.CheckGrant(c.sessions["short"], juiceport.SessionRequest(req)), s.Unfit)
	assert.NotEmpty(t, s.Unfit)
}

func TestErrorKindsKeepTheClientsErrorAndText(t *testing.T) {
	for wire, port := range map[error]error{
		juiceapi.ErrNotFound: reconcile.ErrNoSession, juiceapi.ErrNoCapacity: reconcile.ErrNeverFits,
		juiceapi.ErrInvalidRequest: reconcile.ErrRefused, juiceapi.ErrNotYet: reconcile.ErrNotYet,
	} {
		cause := &juiceapi.APIError{Method: "GET", Path: "/v1/session/s1", StatusCode: 500, Message: "boom", Kind: wire}
		p := juiceport.New(&stub{err: cause})
		_, err := p.GetSession(ctx, "s1", request.Request{})
		require.ErrorIs(t, err, port)
		require.ErrorIs(t, err, wire)
		assert.Equal(t, cause.Error(), err.Error(), "the text ends up in reasons as the client wrote it")
		require.ErrorIs(t, p.CancelSession(ctx, "s1"), port)
		_, err = p.RequestSession(ctx, uuid.New(), request.Request{})
		require.ErrorIs(t, err, port)
	}
	other := fmt.Errorf("dial: %w", juiceapi.ErrUnavailable)
	_, err := juiceport.New(&stub{err: other}).GetSession(ctx, "s1", request.Request{})
	assert.Equal(t, other, err, "an error of no port kind passes as it is")
}

func TestAWalkAsAPoolView(t *testing.T) {
	key := uuid.New()
	keyed := func(id, state string) juiceapi.Session {
		return juiceapi.Session{ID: id, State: state, Version: juiceapi.TaggedVersion("juice-slurm", key)}
	}
	c := &stub{agents: []juiceapi.Agent{
		{ID: "a1", Address: "h1:1", State: juiceapi.AgentActive,
			Sessions: []juiceapi.Session{keyed("s1", juiceapi.StateActive), keyed("s2", juiceapi.StateClosed), {ID: "s3", State: juiceapi.StateActive}}},
		{ID: "a2", Address: "h2:1", State: juiceapi.AgentMissing},
	}}
	now := time.Now()
	v, err := juiceport.New(c).WalkPool(ctx, "test", now)
	require.NoError(t, err)
	assert.Equal(t, now, v.Taken())
	assert.True(t, v.Whole())

	held := v.ByKey(key.String())
	require.Len(t, held, 1, "the key's sessions that have not ended")
	assert.Equal(t, "s1", held[0].Session.ID)
	assert.Equal(t, "a1", held[0].Agent.ID)
	assert.Equal(t, key.String(), held[0].Session.Key, "the key read from the version's tag")

	keyedOnly := v.Keyed()
	require.Len(t, keyedOnly, 1, "every session that has not ended and carries a key: not s2 (closed), not s3 (no key)")
	assert.Equal(t, "s1", keyedOnly[0].Session.ID)
	assert.Equal(t, reconcile.Agent{ID: "a1", Address: "h1:1", State: juiceapi.AgentActive, Active: true}, keyedOnly[0].Agent)

	h, ok := v.Find("s2")
	require.True(t, ok)
	assert.True(t, h.Session.Ended())
	assert.Equal(t, reconcile.Agent{ID: "a1", Address: "h1:1", State: juiceapi.AgentActive, Active: true}, h.Agent)
	_, ok = v.Find("s9")
	assert.False(t, ok)

	a, ok := v.AgentAt("h2:1")
	require.True(t, ok)
	assert.Equal(t, reconcile.Agent{ID: "a2", Address: "h2:1", State: juiceapi.AgentMissing}, a)
	_, ok = v.AgentAt("h3:1")
	assert.False(t, ok)
}
