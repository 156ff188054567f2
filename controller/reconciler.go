package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Reconciler drives one reservation towards what its Wanted level asks, one pass at a time. A pass reads the
// row, acts on the Juice Controller, and writes the outcome; it can stop at any line (a crash, a lost lease, a
// conflicting write) and the next pass picks up from the row: the intent to request is committed before the
// request is sent, and the request carries the reservation's id as its idempotency key, so a repeated request
// finds the session the first one made instead of booking a second.
type Reconciler struct {
	Store reconcile.Store
	Juice juiceapi.Client
	// Key seals session files; ClusterName is checked against each reservation's.
	Key     []byte
	Log     logr.Logger
	Metrics *Metrics
	// WaitPoll is how often a session that is queued or assigned at the controller is looked at again.
	WaitPoll time.Duration
	// ReadyCheck is how often a ready session is checked to be still alive.
	ReadyCheck time.Duration
	Now        func() time.Time
	// Saved, when set, hears of every write this reconciler made, so that the notification of its own write
	// does not bring the reservation straight back into the queue.
	Saved func(id uuid.UUID, version int64, final bool)
}

// Result tells the work queue when to look at the reservation again; zero means only when something changes.
type Result struct {
	RequeueAfter time.Duration
}

// maxSteps bounds the transitions of one pass; a reservation needs at most five to go from pending to released.
const maxSteps = 8

// Reconcile runs one pass over the reservation id.
func (rc *Reconciler) Reconcile(ctx context.Context, id uuid.UUID) (Result, error) {
	start := rc.now()
	res, err := rc.reconcile(ctx, id)
	rc.Metrics.observeReconcile(start, err)
	return res, err
}

func (rc *Reconciler) reconcile(ctx context.Context, id uuid.UUID) (Result, error) {
	r, err := rc.Store.Get(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return Result{}, nil
	}
	if err != nil {
		return Result{}, err
	}
	log := rc.Log.WithValues("job", r.Run.JobID, "run", r.Run.Run, "reservation", r.ID)
	for i := 0; i < maxSteps; i++ {
		if r.State.Final() {
			return Result{}, nil
		}
		res, done, err := rc.step(ctx, log, &r)
		if err != nil || done {
			return res, err
		}
	}
	return Result{RequeueAfter: time.Second}, nil
}

// step takes one transition, or says how long to wait (done).
func (rc *Reconciler) step(ctx context.Context, log logr.Logger, r *reconcile.Reservation) (Result, bool, error) {
	req := juiceapi.SessionRequest{PoolID: r.Request.Pool, GPUs: r.Request.GPUs, VRAMPerGPU: r.Request.VRAM}
	switch r.State {
	case reconcile.StatePending:
		if !r.Wanted {
			return Result{}, false, rc.apply(ctx, log, r, reconcile.EventUnwanted, "no longer wanted before anything was asked of Juice")
		}
		// The intent is committed here, before the controller is asked: a crash after this line finds the
		// reservation requesting, and asks again with the same key.
		return Result{}, false, rc.apply(ctx, log, r, reconcile.EventRequest, "asking the Juice Controller for "+r.Request.Describe())

	case reconcile.StateRequesting:
		sid, err := rc.Juice.RequestSession(ctx, r.ID, req)
		if errors.Is(err, juiceapi.ErrNoCapacity) {
			return Result{}, false, rc.apply(ctx, log, r, reconcile.EventFail, "the Juice Controller cannot ever fit "+r.Request.Describe()+": "+err.Error())
		}
		if err != nil {
			return Result{}, true, fmt.Errorf("request session: %w", err)
		}
		r.SessionID = sid
		return Result{}, false, rc.apply(ctx, log, r, reconcile.EventQueued, "session "+sid+" queued at the Juice Controller")

	case reconcile.StateWaiting:
		s, err := rc.Juice.GetSession(ctx, r.SessionID)
		if errors.Is(err, juiceapi.ErrNotFound) {
			return Result{}, false, rc.apply(ctx, log, r, reconcile.EventClosed, "the Juice Controller no longer knows session "+r.SessionID)
		}
		if err != nil {
			return Result{}, true, fmt.Errorf("get session: %w", err)
		}
		switch {
		case s.Active():
			env := SessionEnv(r, s)
			sealed, err := reconcile.SealSession(rc.Key, r.Run, env)
			if err != nil {
				return Result{}, false, rc.apply(ctx, log, r, reconcile.EventFail, "cannot seal the session file: "+err.Error())
			}
			r.Sealed, r.AgentAddress, r.ReadyAt = sealed, s.Address, rc.now()
			if err := rc.apply(ctx, log, r, reconcile.EventActive, "session "+s.ID+" active on agent "+s.Address); err != nil {
				return Result{}, true, err
			}
			rc.Metrics.observeReady(r)
			// Just seen active: the first check that it is still alive is due in ReadyCheck, not now.
			return Result{RequeueAfter: rc.ReadyCheck}, true, nil
		case s.Ended():
			return Result{}, false, rc.apply(ctx, log, r, reconcile.EventClosed,
				fmt.Sprintf("the Juice Controller ended session %s (%s) before it became active", s.ID, s.State))
		}
		return Result{RequeueAfter: rc.WaitPoll}, true, nil

	case reconcile.StateReady:
		s, err := rc.Juice.GetSession(ctx, r.SessionID)
		if errors.Is(err, juiceapi.ErrNotFound) || err == nil && s.Ended() {
			return Result{}, false, rc.apply(ctx, log, r, reconcile.EventClosed, "the Juice Controller ended session "+r.SessionID+" while the job held it")
		}
		if err != nil {
			return Result{}, true, fmt.Errorf("check session: %w", err)
		}
		return Result{RequeueAfter: rc.ReadyCheck}, true, nil

	case reconcile.StateReleasing:
		if r.SessionID == "" && r.Requested {
			// A request may have reached the controller without its answer reaching us. Asking again with the
			// same key returns that session, if there is one, so that it can be cancelled.
			sid, err := rc.Juice.RequestSession(ctx, r.ID, req)
			switch {
			case errors.Is(err, juiceapi.ErrNoCapacity):
				// The controller refuses the request outright, so it never made a session for the key.
			case err != nil:
				return Result{}, true, fmt.Errorf("find the session to release: %w", err)
			default:
				r.SessionID = sid
			}
		}
		reason := "no session was ever made"
		if r.SessionID != "" {
			if err := rc.Juice.CancelSession(ctx, r.SessionID); err != nil && !errors.Is(err, juiceapi.ErrNotFound) {
				return Result{}, true, fmt.Errorf("cancel session: %w", err)
			}
			reason = "session " + r.SessionID + " cancelled at the Juice Controller"
		}
		return Result{}, false, rc.apply(ctx, log, r, reconcile.EventClosed, reason)
	}
	return Result{}, true, fmt.Errorf("reservation %s: unknown state %q", r.ID, r.State)
}

func (rc *Reconciler) apply(ctx context.Context, log logr.Logger, r *reconcile.Reservation, ev reconcile.Event, reason string) error {
	t, err := reconcile.Apply(r, ev, reason, rc.now())
	if err != nil {
		return err
	}
	// Said before the write, with the version the write will give the row: the write's notification can reach
	// the hub before Save returns.
	if rc.Saved != nil {
		rc.Saved(r.ID, r.Version+1, r.State.Final())
	}
	if err := rc.Store.Save(ctx, r, &t); err != nil {
		return err
	}
	log.Info("reservation moved", "from", t.From, "to", t.To, "reason", reason)
	return nil
}

func (rc *Reconciler) now() time.Time {
	if rc.Now != nil {
		return rc.Now()
	}
	return time.Now()
}

// SessionEnv is what a job's tasks see of their session: the SPANK plugin copies these lines into the task
// environment. JUICE_CFG_OVERRIDE is the legacy Juice client's configuration; it carries no token: the M2M
// token never leaves the reconciler.
func SessionEnv(r *reconcile.Reservation, s *juiceapi.Session) []reconcile.EnvVar {
	idx := make([]string, len(s.GPUs))
	type gpuReq struct {
		VRAMRequired uint64 `json:"vramRequired"`
	}
	reqs := make([]gpuReq, r.Request.GPUs)
	for i := range reqs {
		reqs[i].VRAMRequired = r.Request.VRAM
	}
	for i, g := range s.GPUs {
		idx[i] = strconv.Itoa(g.Index)
	}
	cfg, _ := json.Marshal(struct {
		ID           string   `json:"id"`
		Servers      []string `json:"servers"`
		Requirements any      `json:"requirements"`
	}{s.ID, []string{s.Address}, struct {
		PoolID string   `json:"poolId"`
		GPUs   []gpuReq `json:"gpus"`
	}{r.Request.Pool, reqs}})
	vram := "0"
	if r.Request.VRAM > 0 {
		vram = strconv.FormatUint(r.Request.VRAM, 10)
	}
	return []reconcile.EnvVar{
		{Name: "JUICE_SESSION_ID", Value: s.ID},
		{Name: "JUICE_AGENT_ADDRESS", Value: s.Address},
		{Name: "JUICE_POOL", Value: r.Request.Pool},
		{Name: "JUICE_GPU_COUNT", Value: strconv.Itoa(r.Request.GPUs)},
		{Name: "JUICE_GPUS", Value: strings.Join(idx, ",")},
		{Name: "JUICE_VRAM", Value: vram},
		{Name: "JUICE_REQUEST", Value: r.Request.String()},
		{Name: "JUICE_CFG_OVERRIDE", Value: string(cfg)},
	}
}
