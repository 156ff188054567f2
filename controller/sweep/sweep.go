// Package sweep is the net under the leader's releases: it cancels the sessions at the Juice Controller and removes
// the session files in the state directory that belong to no live run. The leader runs it on a timer
// (Config.Sweep) and the file sweep when it starts leading.
package sweep

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// Store is what the sweep reads of the reservations (store.Store).
type Store interface {
	Cluster() string
	Reservations
	LiveRun(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, error)
}

// Juice is what the sweep asks of the Juice Controller, through the reconciler's own port (reconcile.Juice), so
// that a cancel means the same, and fails the same, wherever it is sent from.
type Juice interface {
	reconcile.PoolWalker
	CancelSession(ctx context.Context, id string) error
}

// Sessions cancels sessions at the controller that carry one of our idempotency keys but belong to no live run:
// the reservation of that key is final, or holds another session. Reservations already release their own
// sessions; the sweep is the net under that, for a session that appeared after its reservation let go.
//
// Only sessions whose key names one of our reservations are touched: a key we do not know may belong to another
// cluster's juice-slurm sharing the pool, so it is left alone. The key is the simulator's idempotencyKey field
// or the tag in the session's version field (juiceapi.TaggedVersion), which the legacy controller echoes; its
// agent listing shows no sessions, so the walk (pool "": every pool) reads every active agent. A session booked
// twice for a run (a lost answer) and still queued when its run let go is found here once it is placed.
//
// It returns how many sessions it cancelled.
func Sessions(ctx context.Context, st Store, juice Juice, log logr.Logger) (int, error) {
	view, err := juice.WalkPool(ctx, "", time.Now())
	if err != nil {
		return 0, fmt.Errorf("sweep: walk the agents: %w", err)
	}
	cancelled := 0
	for _, h := range view.Keyed() {
		s := h.Session
		whose, r, err := Belongs(ctx, st, s.Key, s.ID)
		if err != nil {
			return cancelled, err
		}
		if whose != Orphan {
			continue
		}
		err = juice.CancelSession(ctx, s.ID)
		if errors.Is(err, reconcile.ErrNotYet) {
			continue // its agent has not taken it yet: the next sweep
		}
		if err != nil && !errors.Is(err, reconcile.ErrNoSession) {
			return cancelled, fmt.Errorf("sweep: cancel session %s: %w", s.ID, err)
		}
		cancelled++
		log.Info("cancelled a session that belongs to no live run", "session", s.ID, "agent", h.Agent.ID,
			"reservation", r.ID, "job", r.Run.JobID, "run", r.Run.Run, "state", r.Status.State)
	}
	if cancelled > 0 {
		log.Info("sweep done", "cancelled", cancelled)
	}
	return cancelled, nil
}

// Whose says whom a session at the Juice Controller belongs to.
type Whose int

const (
	// Foreign: its key names none of our reservations (another cluster's juice-slurm, another Juice client).
	Foreign Whose = iota
	// Live: it serves a live run of ours, the one its key names.
	Live
	// Orphan: its key names one of our reservations, which let go of it (final, or holding another session).
	Orphan
)

// Reservations is what Belongs reads (store.Store).
type Reservations interface {
	Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error)
	// Holding returns the open reservation that holds a session, ErrNotFound when none.
	Holding(ctx context.Context, sessionID string) (reconcile.Reservation, error)
}

// Belongs decides whom session id belongs to, by the key it carries (reconcile.Session.Key: the simulator's
// idempotencyKey, or the tag of juiceapi.TaggedVersion in its version field) and the reservation that key names;
// r is that reservation when the session is Live or an Orphan. The sweep cancels orphans; the license sync
// (controller/licenses) counts every session but the live ones as GPUs the pool cannot give this cluster.
func Belongs(ctx context.Context, st Reservations, key, id string) (whose Whose, r reconcile.Reservation, err error) {
	res, err := uuid.Parse(key)
	if err != nil {
		return Foreign, r, nil // no key, or not one of ours
	}
	r, err = st.Get(ctx, res)
	if errors.Is(err, reconcile.ErrNotFound) {
		return Foreign, r, nil
	}
	if err != nil {
		return Foreign, r, fmt.Errorf("whose is session %s: %w", id, err)
	}
	if !r.Status.State.Final() && (r.Status.SessionID == "" || r.Status.SessionID == id) {
		return Live, r, nil
	}
	// A session handed from run to run (reconcile's hand-off) keeps the first run's key, and that run's reservation,
	// final, still names it: it is live while another run holds it. (An orphan of a lost answer is another session
	// than the one its key's reservation names: no query for it.)
	if r.Status.State.Final() && r.Status.SessionID == id {
		holder, err := st.Holding(ctx, id)
		if err == nil {
			return Live, holder, nil
		}
		if !errors.Is(err, reconcile.ErrNotFound) {
			return Foreign, r, fmt.Errorf("whose is session %s: %w", id, err)
		}
	}
	return Orphan, r, nil
}

// Files removes the session files in the state directory that no ready reservation owns: the reservation
// a file names is gone, released or failed (the reconciler removes a run's file when it leaves ready; this is the
// net under that, and under an epilog that never ran), or, for a file that names none (version 1, or a header
// that does not parse), its run has no ready reservation. A file whose header names another cluster is left
// alone. It returns how many files it removed.
func Files(ctx context.Context, st Store, dir *session.StateDir, log logr.Logger) (int, error) {
	files, err := dir.List()
	if err != nil {
		return 0, fmt.Errorf("sweep files: %w", err)
	}
	removed := 0
	for _, f := range files {
		job, run, _ := session.ParseFileName(f.Name)
		why, err := staleFile(ctx, st, f, reconcile.RunID{Cluster: st.Cluster(), JobID: job, Run: run})
		if err != nil {
			return removed, fmt.Errorf("sweep files: %s: %w", f.Name, err)
		}
		if why == "" {
			continue
		}
		ok, err := dir.Remove(f)
		if err != nil {
			return removed, fmt.Errorf("sweep files: %w", err)
		}
		if ok {
			removed++
			log.Info("removed a stale session file", "file", f.Name, "why", why)
		}
	}
	return removed, nil
}

// staleFile says why f is stale, or "" when a ready reservation owns it (or it is another cluster's).
func staleFile(ctx context.Context, st Store, f session.StateFile, run reconcile.RunID) (string, error) {
	if f.HeaderErr == nil && f.Header.Binding.Cluster != st.Cluster() {
		return "", nil
	}
	if f.HeaderErr == nil && (f.Header.Binding.JobID != run.JobID || f.Header.Binding.Run != run.Run) {
		return fmt.Sprintf("its header is for %s, not its name's run", f.Header.Binding), nil
	}
	if res := f.Reservation(); res != uuid.Nil {
		r, err := st.Get(ctx, res)
		if errors.Is(err, reconcile.ErrNotFound) {
			return fmt.Sprintf("its reservation %s does not exist", res), nil
		}
		if err != nil {
			return "", err
		}
		if r.Status.State != reconcile.StateReady {
			return fmt.Sprintf("its reservation %s is %s", res, r.Status.State), nil
		}
		return "", nil
	}
	r, err := st.LiveRun(ctx, run)
	if errors.Is(err, reconcile.ErrNotFound) {
		return "it names no reservation and its run has no live one", nil
	}
	if err != nil {
		return "", err
	}
	if r.Status.State != reconcile.StateReady {
		return fmt.Sprintf("it names no reservation and its run's is %s", r.Status.State), nil
	}
	if f.HeaderErr != nil {
		return "its header does not parse", nil
	}
	return "", nil
}
