// Package memstore is an in-memory reconcile.Store for tests of the Reconciler that need no PostgreSQL. It keeps
// what the PostgreSQL store (reconcile/store) promises of the four methods: a status write based on a version
// that moved since is refused with reconcile.ErrConflict, transitions are recorded as history, the sealed session
// file is kept apart (Get leaves it out, a write without one keeps it, a final state drops it), and HeldGPUs
// counts the runs that were asked of the Juice Controller and are not released.
//
// Intercept wraps any reconcile.Store, in the manner of controller-runtime's interceptor client: a test injects a
// conflict, a transient error, or a crash after a write, and calls through to the real store for the rest.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Store is an in-memory reconcile.Store of one cluster. Its zero value is empty and ready.
type Store struct {
	// Now stamps status writes (UpdatedAt); nil is time.Now.
	Now func() time.Time

	mu   sync.Mutex
	rows map[uuid.UUID]*row
}

var _ reconcile.Store = (*Store)(nil)

type row struct {
	r      reconcile.Reservation // Status.Sealed always nil: the file is kept in sealed
	sealed []byte
	events []reconcile.Transition
}

// Put stores r as it is, its sealed file included, replacing any row with its id: a test's starting point, or an
// observer's write. Its version is r.Status.Version.
func (s *Store) Put(r reconcile.Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rows == nil {
		s.rows = map[uuid.UUID]*row{}
	}
	w := &row{sealed: slices.Clone(r.Status.Sealed)}
	if old := s.rows[r.ID]; old != nil {
		w.events = old.events
	}
	r.Status.Sealed = nil
	w.r = r
	s.rows[r.ID] = w
}

// Update changes the spec of reservation id as an observer does (not the status: only SaveStatus writes it, and
// observers' writes never move its version); false when there is no such reservation.
func (s *Store) Update(id uuid.UUID, spec func(*reconcile.Reservation)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.rows[id]
	if w == nil {
		return false
	}
	status := w.r.Status
	spec(&w.r)
	w.r.Status = status
	return true
}

// Get implements reconcile.Store: the reservation without its sealed file.
func (s *Store) Get(_ context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.rows[id]
	if w == nil {
		return reconcile.Reservation{}, fmt.Errorf("get reservation %s: %w", id, reconcile.ErrNotFound)
	}
	return w.r, nil
}

// Reservation returns reservation id with its sealed file; false when there is none.
func (s *Store) Reservation(id uuid.UUID) (reconcile.Reservation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.rows[id]
	if w == nil {
		return reconcile.Reservation{}, false
	}
	r := w.r
	r.Status.Sealed = slices.Clone(w.sealed)
	return r, true
}

// Events returns reservation id's history, in order: the transitions SaveStatus recorded.
func (s *Store) Events(id uuid.UUID) []reconcile.Transition {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.rows[id]; w != nil {
		return slices.Clone(w.events)
	}
	return nil
}

// SaveStatus implements reconcile.Store: r's status, read at r.Status.Version, and ts as its history. A status
// written since gives reconcile.ErrConflict and changes nothing. r's UpdatedAt and Version are the new row's.
func (s *Store) SaveStatus(_ context.Context, r *reconcile.Reservation, ts ...reconcile.Transition) error {
	if len(ts) == 0 {
		return fmt.Errorf("save reservation %s of %s: no transition", r.ID, r.Run)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.rows[r.ID]
	if w == nil || w.r.Status.Version != r.Status.Version {
		// The PostgreSQL store cannot tell a missing row from a moved version either: no row comes back.
		return fmt.Errorf("save reservation %s of %s: %w", r.ID, r.Run, reconcile.ErrConflict)
	}
	s.save(r, ts)
	return nil
}

// save writes r's status and history into its row, whose version the caller checked.
func (s *Store) save(r *reconcile.Reservation, ts []reconcile.Transition) {
	w := s.rows[r.ID]
	st := r.Status
	switch {
	case st.State.Final():
		w.sealed, st.SealedJobID = nil, 0
	case st.Sealed != nil:
		w.sealed = slices.Clone(st.Sealed)
	default:
		st.SealedJobID = w.r.Status.SealedJobID // no file written: the stored one, and its job, stand
	}
	st.Sealed = nil
	st.UpdatedAt = s.now()
	st.Version++
	w.r.Status = st
	w.events = append(w.events, ts...)
	r.Status.UpdatedAt, r.Status.Version = st.UpdatedAt, st.Version
}

// Sealed implements reconcile.Store: nil when the reservation has no file (not ready, or final).
func (s *Store) Sealed(_ context.Context, id uuid.UUID) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.rows[id]
	if w == nil {
		return nil, fmt.Errorf("sealed session of %s: %w", id, reconcile.ErrNotFound)
	}
	return slices.Clone(w.sealed), nil
}

// held are the states of runs that were asked of the Juice Controller and are not released yet.
var held = []reconcile.State{reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady, reconcile.StateReleasing}

// HeldGPUs implements reconcile.Store.
func (s *Store) HeldGPUs(_ context.Context, pool, user string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.rows {
		if w.r.Request.Pool == pool && w.r.UserName == user && slices.Contains(held, w.r.Status.State) {
			n += w.r.Request.GPUs
		}
	}
	return n, nil
}

// YieldPool implements reconcile.Store as the store does: the open, wanted reservations of pool whose job Slurm
// shows PENDING and that hold or ask for a session let go, their runs not over.
func (s *Store) YieldPool(_ context.Context, pool, why string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, w := range s.rows {
		r := &w.r
		if r.Request.Pool == pool && r.Spec.Wanted && r.Spec.JobState == "PENDING" && slices.Contains(yielding, r.Status.State) {
			r.Spec.Wanted, r.Spec.WantReason = false, why
			n++
		}
	}
	return n, nil
}

// HandoffTaker implements reconcile.Store as the store does: a wanted reservation alike to from, pending or a
// started run's waiting with its own session queued; a started run's first, then the oldest.
func (s *Store) HandoffTaker(_ context.Context, from *reconcile.Reservation) (reconcile.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *reconcile.Reservation
	for _, w := range s.rows {
		r := &w.r
		started := slices.Contains(reconcile.StartedStates, r.Spec.JobState)
		queued := r.Status.State == reconcile.StateWaiting && started && r.Status.SessionID != "" && !r.Status.MaybeOrphans
		if !alike(from, r) || r.Status.State != reconcile.StatePending && !queued || !r.Spec.Wanted {
			continue
		}
		if best == nil || started && !slices.Contains(reconcile.StartedStates, best.Spec.JobState) ||
			started == slices.Contains(reconcile.StartedStates, best.Spec.JobState) && r.CreatedAt.Before(best.CreatedAt) {
			best = r
		}
	}
	if best == nil {
		return reconcile.Reservation{}, fmt.Errorf("a run to take the session of %s: %w", from.Run, reconcile.ErrNotFound)
	}
	return *best, nil
}

// HandoffLingers implements reconcile.Store as the store does.
func (s *Store) HandoffLingers(_ context.Context, to *reconcile.Reservation, within time.Duration) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.rows {
		r, st := &w.r, w.r.Status
		lingers := st.State == reconcile.StateReleasing && s.now().Sub(st.UpdatedAt) < within ||
			st.State == reconcile.StateReady && !r.Spec.Wanted
		if alike(to, r) && lingers && r.Spec.RunOver && r.Spec.WantReason != reconcile.AdminReleased && st.FailReason == "" &&
			st.SessionID != "" && !st.ReadyAt.IsZero() && !st.MaybeOrphans {
			return true, nil
		}
	}
	return false, nil
}

// LikeAsking implements reconcile.Store as the store does.
func (s *Store) LikeAsking(_ context.Context, r *reconcile.Reservation, max int) ([]reconcile.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []reconcile.Reservation
	for _, w := range s.rows {
		st := w.r.Status.State
		if alike(r, &w.r) && w.r.Spec.Wanted && (st == reconcile.StateRequesting || st == reconcile.StateWaiting) {
			out = append(out, w.r)
		}
	}
	slices.SortFunc(out, func(a, b reconcile.Reservation) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID.String(), b.ID.String())
	})
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}

// alike: another reservation of the same user, account and request (the store's query, not the decision).
func alike(a, b *reconcile.Reservation) bool {
	return a.ID != b.ID && a.UserName != "" && a.UserName == b.UserName && a.Account == b.Account && a.Request == b.Request
}

// HandOver implements reconcile.Store: both statuses or neither.
func (s *Store) HandOver(_ context.Context, giver, taker *reconcile.Reservation, tg []reconcile.Transition, tt reconcile.Transition) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range []*reconcile.Reservation{giver, taker} {
		if w := s.rows[r.ID]; w == nil || w.r.Status.Version != r.Status.Version {
			return fmt.Errorf("hand session %s from %s to %s: %w", giver.Status.SessionID, giver.Run, taker.Run, reconcile.ErrConflict)
		}
	}
	s.save(giver, tg)
	s.save(taker, []reconcile.Transition{tt})
	return nil
}

// Holding returns the open reservation that holds session id (the store's Holding); ErrNotFound when none.
func (s *Store) Holding(_ context.Context, sessionID string) (reconcile.Reservation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.rows {
		if w.r.Status.SessionID == sessionID && !w.r.Status.State.Final() {
			return w.r, nil
		}
	}
	return reconcile.Reservation{}, fmt.Errorf("the run holding session %s: %w", sessionID, reconcile.ErrNotFound)
}

// yielding are the states of a reservation that holds or asks for a session.
var yielding = []reconcile.State{reconcile.StateRequesting, reconcile.StateWaiting, reconcile.StateReady}

func (s *Store) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Funcs are the interceptors of a store: each one set is called instead of the method, with the store it wraps
// to call through to.
type Funcs struct {
	Get        func(ctx context.Context, next reconcile.Store, id uuid.UUID) (reconcile.Reservation, error)
	SaveStatus func(ctx context.Context, next reconcile.Store, r *reconcile.Reservation, ts ...reconcile.Transition) error
	Sealed     func(ctx context.Context, next reconcile.Store, id uuid.UUID) ([]byte, error)
	HeldGPUs   func(ctx context.Context, next reconcile.Store, pool, user string) (int, error)
	YieldPool  func(ctx context.Context, next reconcile.Store, pool, why string) (int, error)
	HandOver   func(ctx context.Context, next reconcile.Store, giver, taker *reconcile.Reservation, tg []reconcile.Transition, tt reconcile.Transition) error
}

// Intercept returns next with the interceptors of f in front of it.
func Intercept(next reconcile.Store, f Funcs) reconcile.Store { return intercepted{next, f} }

type intercepted struct {
	next reconcile.Store
	f    Funcs
}

func (i intercepted) Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	if i.f.Get != nil {
		return i.f.Get(ctx, i.next, id)
	}
	return i.next.Get(ctx, id)
}

func (i intercepted) SaveStatus(ctx context.Context, r *reconcile.Reservation, ts ...reconcile.Transition) error {
	if i.f.SaveStatus != nil {
		return i.f.SaveStatus(ctx, i.next, r, ts...)
	}
	return i.next.SaveStatus(ctx, r, ts...)
}

func (i intercepted) Sealed(ctx context.Context, id uuid.UUID) ([]byte, error) {
	if i.f.Sealed != nil {
		return i.f.Sealed(ctx, i.next, id)
	}
	return i.next.Sealed(ctx, id)
}

func (i intercepted) HeldGPUs(ctx context.Context, pool, user string) (int, error) {
	if i.f.HeldGPUs != nil {
		return i.f.HeldGPUs(ctx, i.next, pool, user)
	}
	return i.next.HeldGPUs(ctx, pool, user)
}

func (i intercepted) YieldPool(ctx context.Context, pool, why string) (int, error) {
	if i.f.YieldPool != nil {
		return i.f.YieldPool(ctx, i.next, pool, why)
	}
	return i.next.YieldPool(ctx, pool, why)
}

func (i intercepted) HandoffTaker(ctx context.Context, from *reconcile.Reservation) (reconcile.Reservation, error) {
	return i.next.HandoffTaker(ctx, from)
}

func (i intercepted) HandoffLingers(ctx context.Context, to *reconcile.Reservation, within time.Duration) (bool, error) {
	return i.next.HandoffLingers(ctx, to, within)
}

func (i intercepted) LikeAsking(ctx context.Context, r *reconcile.Reservation, max int) ([]reconcile.Reservation, error) {
	return i.next.LikeAsking(ctx, r, max)
}

func (i intercepted) HandOver(ctx context.Context, giver, taker *reconcile.Reservation, tg []reconcile.Transition, tt reconcile.Transition) error {
	if i.f.HandOver != nil {
		return i.f.HandOver(ctx, i.next, giver, taker, tg, tt)
	}
	return i.next.HandOver(ctx, giver, taker, tg, tt)
}
