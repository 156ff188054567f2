package controller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/juiceport"
	"github.com/juice-slurm/juice-slurm/controller/sweep"
	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/test/fakeclock"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// The tests here run the reconciler against juice-sim with one behaviour of the legacy controller switched on at
// a time (juicesim.Legacy), or all of them; test/juicelegacy runs the same client against the real legacy
// controller.

// sessionsOfRun are the simulator's sessions requested under the reservation's key that still hold GPUs (the
// simulator keeps the key for its own bookkeeping even when it ignores it on the wire).
func (h *harness) sessionsOfRun(id uuid.UUID) []juiceapi.Session {
	var out []juiceapi.Session
	for _, s := range h.liveSessions() {
		if s.IdempotencyKey == id.String() {
			out = append(out, s)
		}
	}
	return out
}

// Without server-side idempotency, a request whose answer is lost (the first response dropped, or the
// reconciler killed between request and answer) still leaves the run exactly one session: the next pass finds
// the session by the key carried in its version field instead of booking another.
func TestLegacyLostAnswerGivesOneSession(t *testing.T) {
	t.Parallel()
	for _, legacy := range []juicesim.Legacy{{IgnoreIdempotencyKey: true}, juicesim.AllLegacy()} {
		h := newHarnessWith(t, legacy)
		ctx := context.Background()
		r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 1}, gpus2)
		_, err := h.reconciler(crashingJuice{h.juice, true}).Reconcile(ctx, r.ID)
		require.ErrorIs(t, err, errCrash)
		require.Len(t, h.sessionsOfRun(r.ID), 1, "the lost request made a session")

		got := h.driveTo(h.reconciler(nil), r.ID, reconcile.StateReady)
		live := h.sessionsOfRun(r.ID)
		require.Len(t, live, 1, "%+v: exactly one session", legacy)
		require.Equal(t, live[0].ID, got.Status.SessionID)
		require.Len(t, h.sim.Sim.Sessions(), 1, "%+v: no second session was ever booked", legacy)
	}
}

// A lost answer while the pool is full: the session is queued, so no agent shows it and the next pass books a
// second one. Once both are placed the run keeps one and cancels the other: never two sessions for a run that
// is ready, and none left once it is released.
func TestLegacyLostAnswerWhileQueuedCancelsTheOrphan(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.AllLegacy())
	ctx := context.Background()
	// Fill both agents with slices so a whole-GPU request queues.
	var blockers []string
	for range 2 {
		id, err := h.juice.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 4, VRAMPerGPU: 79 * vram.GiB})
		require.NoError(t, err)
		blockers = append(blockers, id)
	}
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 2}, request.Request{Pool: "test", GPUs: 1, VRAM: 40 * vram.GiB})
	_, err := h.reconciler(crashingJuice{h.juice, true}).Reconcile(ctx, r.ID)
	require.ErrorIs(t, err, errCrash)
	rc := h.reconciler(nil)
	got := h.driveTo(rc, r.ID, reconcile.StateWaiting)
	require.Len(t, h.sim.Sim.Sessions(), 4, "the queued session was invisible: a second one was booked")

	for _, id := range blockers {
		require.NoError(t, h.juice.CancelSession(ctx, id))
	}
	got = h.driveTo(rc, r.ID, reconcile.StateReady)
	live := h.sessionsOfRun(r.ID)
	require.Len(t, live, 1, "the orphan was cancelled when the run became ready")
	require.Equal(t, got.Status.SessionID, live[0].ID)

	_, err = h.store.Unwant(ctx, r.ID, "job ended", true)
	require.NoError(t, err)
	h.driveTo(rc, r.ID, reconcile.StateReleased)
	require.Empty(t, h.sessionsOfRun(r.ID))
	require.Zero(t, h.sim.Sim.Reopened(), "no closed session was cancelled again")
}

// Cancelling a closed session reopens it at the legacy controller. Releases, repeated cancels and the sweep
// never do.
func TestLegacyCancelNeverReopens(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.Legacy{CancelReopens: true})
	ctx := context.Background()
	rc := h.reconciler(nil)
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 3}, gpus2)
	r = h.driveTo(rc, r.ID, reconcile.StateReady)
	_, err := h.store.Unwant(ctx, r.ID, "job ended", true)
	require.NoError(t, err)
	h.driveTo(rc, r.ID, reconcile.StateReleased)
	require.NoError(t, h.juice.CancelSession(ctx, r.Status.SessionID), "cancel twice")
	require.NoError(t, h.juice.CancelSession(ctx, r.Status.SessionID), "and three times")
	_, err = sweep.Sessions(ctx, h.store, juiceport.New(h.juice), h.log)
	require.NoError(t, err)
	require.Zero(t, h.sim.Sim.Reopened())
	s, err := h.juice.GetSession(ctx, r.Status.SessionID)
	require.NoError(t, err)
	require.Equal(t, juiceapi.StateClosed, s.State)
}

// The legacy controller gives a whole-GPU request every GPU of the agent, in any order: the job gets exactly the
// GPUs it asked for, the lowest indexes.
func TestLegacyMoreGPUsThanAskedGivesExactlyTheAsked(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.Legacy{WholeAgentGrant: true})
	ctx := context.Background()
	run := reconcile.RunID{Cluster: "c1", JobID: 4}
	r := h.ensure(run, gpus2)
	got := h.driveTo(h.reconciler(nil), r.ID, reconcile.StateReady)
	s, err := h.juice.GetSession(ctx, got.Status.SessionID)
	require.NoError(t, err)
	require.Len(t, s.GPUs, 4, "the controller gave the whole agent")
	sealed, err := h.store.Sealed(ctx, r.ID)
	require.NoError(t, err)
	env, err := session.Open(sealed, run.Binding(), h.key)
	require.NoError(t, err)
	require.Contains(t, env, session.EnvVar{Name: "JUICE_GPU_COUNT", Value: "2"})
	require.Contains(t, env, session.EnvVar{Name: "JUICE_GPUS", Value: "0,1"})
}

// shortJuice reads sessions as giving fewer GPUs, or less VRAM, than they do, or as empty.
type shortJuice struct {
	juiceapi.Client
	mangle func(*juiceapi.Session)
	on     *atomic.Bool
}

func (c shortJuice) GetSession(ctx context.Context, id string) (*juiceapi.Session, error) {
	s, err := c.Client.GetSession(ctx, id)
	if err == nil && c.on.Load() {
		c.mangle(s)
	}
	return s, err
}

// A session read that does not serve the request (empty, fewer GPUs, less VRAM) is not ready: the reservation
// waits, says why (describe shows it), and becomes ready once a read serves it.
func TestLegacySessionReadsAreValidated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		req    request.Request
		mangle func(*juiceapi.Session)
		reason string
	}{
		{"empty", gpus2, func(s *juiceapi.Session) { *s = juiceapi.Session{State: juiceapi.StateActive} }, "empty session"},
		{"fewer GPUs", gpus2, func(s *juiceapi.Session) { s.GPUs = s.GPUs[:1] }, "gives 1 GPU(s) for 2 asked"},
		{"less VRAM", request.Request{Pool: "test", GPUs: 1, VRAM: 8 * vram.GiB},
			func(s *juiceapi.Session) { s.GPUs[0].VRAMRequired = 4 * vram.GiB }, "gives 0 GPU(s) with at least 8GiB of VRAM for 1 asked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newHarnessWith(t, juicesim.Legacy{})
			ctx := context.Background()
			on := &atomic.Bool{}
			on.Store(true)
			rc := h.reconciler(shortJuice{h.juice, c.mangle, on})
			r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 5}, c.req)
			h.driveTo(rc, r.ID, reconcile.StateWaiting)
			for range 3 {
				_, err := rc.Reconcile(ctx, r.ID)
				require.NoError(t, err)
			}
			got, err := h.store.Get(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, reconcile.StateWaiting, got.Status.State)
			require.Contains(t, got.Status.Reason, c.reason)
			evs, err := h.store.Events(ctx, r.ID)
			require.NoError(t, err)
			n := 0
			for _, ev := range evs {
				if strings.Contains(ev.Reason, c.reason) {
					n++
				}
			}
			require.Equal(t, 1, n, "the reason is recorded once, not at every look")
			on.Store(false)
			h.driveTo(rc, r.ID, reconcile.StateReady)
		})
	}
}

// A request that no agent of the pool can ever fit is never sent (the legacy controller would accept it and
// exit): the run fails at once with the reason, and the controller stays up.
func TestLegacyNeverFitIsNeverSent(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.AllLegacy())
	for i, req := range []request.Request{{Pool: "test", GPUs: 8}, {Pool: "test", GPUs: 1, VRAM: 81 * vram.GiB}} {
		r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: uint32(60 + i)}, req)
		got := h.driveTo(h.reconciler(nil), r.ID, reconcile.StateFailed)
		require.Contains(t, got.Status.FailReason, "can ever fit")
	}
	crashed, why := h.sim.Sim.Crashed()
	require.False(t, crashed, "the controller exited: %s", why)
	require.Empty(t, h.sim.Sim.Sessions(), "nothing was sent")
}

// The legacy controller knows pools by id only: a name is resolved through the configured map; without one the
// run fails at once saying what to configure, and nothing is sent (a name would get a phantom session).
func TestLegacyPoolNamesAreResolved(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.Legacy{PoolUUIDs: true})
	ctx := context.Background()
	id, ok := h.sim.Sim.PoolID("test")
	require.True(t, ok)
	_, err := uuid.Parse(id)
	require.NoError(t, err, "the pool's id is a UUID")
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 7}, gpus2)
	got := h.driveTo(h.reconciler(nil), r.ID, reconcile.StateReady)
	s, err := h.juice.GetSession(ctx, got.Status.SessionID)
	require.NoError(t, err)
	require.Equal(t, id, s.PoolID)

	unmapped, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: h.sim.URL, TokenFile: h.tokenFile, MaxAttempts: 2})
	require.NoError(t, err)
	r2 := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 8}, gpus2)
	got = h.driveTo(h.reconciler(unmapped), r2.ID, reconcile.StateFailed)
	require.Contains(t, got.Status.FailReason, "knows pools by id only")
	require.Len(t, h.sim.Sim.Sessions(), 1, "nothing was sent for the unresolved name")
}

// The legacy controller keeps the sessions of a missing agent "active" for ever. The ready check sees that the
// agent is no longer an active agent of the pool, and the session is lost (the run fails, with the reason).
func TestLegacyMissingAgentLosesItsSessions(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.AllLegacy())
	ctx := context.Background()
	rc := h.reconciler(nil)
	rc.Liveness = &reconcile.Liveness{Juice: juiceport.New(h.juice), Period: time.Hour}
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 9}, gpus2)
	got := h.driveTo(rc, r.ID, reconcile.StateReady)
	res, err := rc.Reconcile(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, time.Second, res.RequeueAfter, "alive: checked again after ReadyCheck")

	view, err := juiceapi.WalkPool(ctx, h.juice, "test", time.Now())
	require.NoError(t, err)
	_, holder := view.Find(got.Status.SessionID)
	require.NotNil(t, holder, "the walk finds the session on its agent")
	agent := holder.ID
	require.NoError(t, h.sim.Sim.SetAgentState(agent, juiceapi.AgentMissing))
	s, err := h.juice.GetSession(ctx, got.Status.SessionID)
	require.NoError(t, err)
	require.Equal(t, juiceapi.StateActive, s.State, "the legacy controller still calls it active")

	rc.Liveness = &reconcile.Liveness{Juice: juiceport.New(h.juice), Period: time.Hour} // a new period
	got = h.driveTo(rc, r.ID, reconcile.StateFailed)
	require.Contains(t, got.Status.FailReason, "lost: ")
}

// simCalls counts the simulator's answered requests on a route.
func (h *harness) simCalls(route string) int {
	h.t.Helper()
	return world.SimCalls(h.t, h.sim.Sim, route)
}

// Liveness per pool walk: checking N ready runs costs one agent listing and one read per active agent per
// period, not N session reads, and a second check within the period costs nothing.
func TestLivenessCallsGrowWithAgentsNotSessions(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.AllLegacy())
	ctx := context.Background()
	rc := h.reconciler(nil)
	const runs = 40 // 8 GPUs, but legacy whole-GPU sessions stack: all fit
	var ids []uuid.UUID
	for i := range runs {
		r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: uint32(1000 + i)}, request.Request{Pool: "test", GPUs: 1})
		h.driveTo(rc, r.ID, reconcile.StateReady)
		ids = append(ids, r.ID)
	}
	clock := time.Now()
	rc.Liveness = &reconcile.Liveness{Juice: juiceport.New(h.juice), Period: time.Minute, Now: func() time.Time { return clock }}
	gets0, lists0, agents0 := h.simCalls("GET /v1/session/{id}"), h.simCalls("GET /v1/agents"), h.simCalls("GET /v1/agent/{id}")
	for round := range 2 {
		for _, id := range ids {
			res, err := rc.Reconcile(ctx, id)
			require.NoError(t, err)
			require.Equal(t, time.Second, res.RequeueAfter, "round %d: alive", round)
		}
	}
	require.Zero(t, h.simCalls("GET /v1/session/{id}")-gets0, "no session read one by one")
	require.Equal(t, 1, h.simCalls("GET /v1/agents")-lists0, "one listing for the period")
	require.Equal(t, 2, h.simCalls("GET /v1/agent/{id}")-agents0, "one read per agent for the period")

	clock = clock.Add(time.Minute) // the next period: one more walk
	for _, id := range ids {
		_, err := rc.Reconcile(ctx, id)
		require.NoError(t, err)
	}
	require.Equal(t, 2, h.simCalls("GET /v1/agents")-lists0)
	require.Equal(t, 4, h.simCalls("GET /v1/agent/{id}")-agents0)
}

// A run let go while its session is assigned but not yet taken by its agent waits to cancel it until it is active:
// the legacy controller would pass the cancel to an agent that does not hold the session, and the agent would exit
// (seen in the first legacy chaos run).
func TestLegacyCancelWaitsForTheAgent(t *testing.T) {
	t.Parallel()
	clock := fakeclock.New(time.Now())
	h := newHarnessWith(t, juicesim.AllLegacy(), func(c *juicesim.Config) { c.Now, c.ActivateDelay = clock.Now, time.Second })
	ctx := context.Background()
	rc := h.reconciler(nil)
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 10}, gpus2)
	got := h.driveTo(rc, r.ID, reconcile.StateWaiting)
	s, err := h.juice.GetSession(ctx, got.Status.SessionID)
	require.NoError(t, err)
	require.Equal(t, juiceapi.StateAssigned, s.State)

	_, err = h.store.Unwant(ctx, r.ID, "job cancelled", true)
	require.NoError(t, err)
	for range 3 {
		res, err := rc.Reconcile(ctx, r.ID)
		require.NoError(t, err)
		require.Equal(t, rc.WaitPoll, res.RequeueAfter, "looked at again soon")
	}
	require.Equal(t, reconcile.StateReleasing, h.stateOf(r.Run), "not cancelled while its agent has not taken it")
	clock.Add(time.Second)
	h.driveTo(rc, r.ID, reconcile.StateReleased)
	require.Zero(t, h.sim.Sim.AgentsKilled())
	require.NoError(t, h.sim.Sim.Check())
}

// agentCounter counts the agent reads a reconciler makes: the pool walks that look for a run's sessions.
type agentCounter struct {
	juiceapi.Client
	lists, gets atomic.Int64
}

func (c *agentCounter) ListAgents(ctx context.Context, pool string) ([]juiceapi.Agent, error) {
	c.lists.Add(1)
	return c.Client.ListAgents(ctx, pool)
}

func (c *agentCounter) GetAgent(ctx context.Context, id string) (*juiceapi.Agent, error) {
	c.gets.Add(1)
	return c.Client.GetAgent(ctx, id)
}

// A session got on the run's first request is the only one its key can name: becoming ready and being released
// walk no agents (each walk reads every agent of the pool: with a walk per run, 10,000 runs on 1,250 agents made
// 12 million calls and never became ready). Runs whose answers were lost do look, and share one walk of the pool
// per moment instead of one each.
func TestOnlyRunsThatAskedTwiceWalkThePool(t *testing.T) {
	t.Parallel()
	h := newHarnessWith(t, juicesim.AllLegacy())
	ctx := context.Background()
	counted := &agentCounter{Client: h.juice}
	rc := h.reconciler(counted)
	rc.Liveness = &reconcile.Liveness{Juice: juiceport.New(counted), Period: time.Minute}

	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 1}, gpus2)
	got := h.driveTo(rc, r.ID, reconcile.StateReady)
	require.False(t, got.Status.MaybeOrphans)
	_, err := h.store.Unwant(ctx, r.ID, "job ended", true)
	require.NoError(t, err)
	h.driveTo(rc, r.ID, reconcile.StateReleased)
	require.Zero(t, counted.lists.Load()+counted.gets.Load(), "agent reads for a run asked once")
	require.Empty(t, h.sessionsOfRun(r.ID), "its session was cancelled")

	// Five runs whose answers are lost (the request reached the controller): each must look for its session, and
	// the lookups share the walks of the pool.
	var ids []uuid.UUID
	for job := uint32(2); job <= 6; job++ {
		r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: job}, request.Request{Pool: "test", GPUs: 1})
		_, err := h.reconciler(crashingJuice{h.juice, true}).Reconcile(ctx, r.ID)
		require.ErrorIs(t, err, errCrash)
		ids = append(ids, r.ID)
	}
	for _, id := range ids {
		got := h.driveTo(rc, id, reconcile.StateReady)
		require.True(t, got.Status.MaybeOrphans, "a session learnt after a lost answer may have a twin")
		require.Len(t, h.sessionsOfRun(id), 1, "the lost request's session was found, not booked again")
	}
	require.Equal(t, int64(1), counted.lists.Load(), "one walk of the pool served the five lookups")
}

// A session the controller places at once costs the run two writes: the intent to ask, then the session queued
// and active in one statement (the three moves are still three events).
func TestSessionPlacedAtOnceIsTwoWrites(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 31}, gpus2)
	_, err := h.reconciler(nil).Reconcile(ctx, r.ID)
	require.NoError(t, err)
	got, err := h.store.Get(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, reconcile.StateReady, got.Status.State)
	require.Equal(t, r.Status.Version+2, got.Status.Version, "status writes from pending to ready")
	events, err := h.store.Events(ctx, r.ID)
	require.NoError(t, err)
	var moves []reconcile.State
	for _, e := range events[1:] {
		moves = append(moves, e.To)
	}
	require.Equal(t, []reconcile.State{reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady}, moves)
}

// failingAgents fails every agent read, as an overloaded controller would.
type failingAgents struct{ juiceapi.Client }

func (failingAgents) GetAgent(context.Context, string) (*juiceapi.Agent, error) {
	return nil, juiceapi.ErrUnavailable
}

// A pool that cannot be walked leaves its ready runs for the next period: handing each of them to the reconciler
// would only make each fail on the same walk (one failed walk of 100,000 ready runs was 60,000 passes a minute).
// A walk that works names only the runs whose session is gone.
func TestLivenessWatchSkipsAPoolItCannotWalk(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	rc := h.reconciler(nil)
	r := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 41}, gpus2)
	got := h.driveTo(rc, r.ID, reconcile.StateReady)
	runs, err := h.store.Ready(ctx)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	runs[0].ReadyAt = got.Status.ReadyAt.Add(-time.Minute) // before any walk

	suspects, err := (&reconcile.Liveness{Juice: juiceport.New(failingAgents{h.juice})}).Suspects(ctx, runs)
	require.Error(t, err)
	require.Empty(t, suspects)

	l := &reconcile.Liveness{Juice: juiceport.New(h.juice)}
	suspects, err = l.Suspects(ctx, runs)
	require.NoError(t, err)
	require.Empty(t, suspects, "its session is alive")
	require.NoError(t, h.sim.Sim.Cancel(got.Status.SessionID))
	suspects, err = (&reconcile.Liveness{Juice: juiceport.New(h.juice)}).Suspects(ctx, runs)
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{r.ID}, suspects, "its session ended")
}
