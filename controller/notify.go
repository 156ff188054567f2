package controller

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Hub turns PostgreSQL's NOTIFY on reconcile.NotifyChannel into wake-ups inside this process: a waiting prolog
// wakes the moment its reservation changes, whichever replica wrote the change, and the leader's work queue
// hears of reservations that a prolog registered on another replica.
//
// NOTIFY is an optimisation, never the only path: a pooler in transaction mode drops LISTEN, and a connection
// can break. Everyone who waits on the hub also re-reads the row on a timer, and the hub tells everyone to
// re-read after it reconnects, since notifications sent while it was away are lost.
type Hub struct {
	Pool *pgxpool.Pool
	Log  logr.Logger

	mu   sync.Mutex
	subs map[uuid.UUID]map[chan struct{}]struct{}
	any  []func(id uuid.UUID, version int64)
}

// Subscribe returns a channel that receives a value whenever reservation id changes (coalesced: one pending
// value at most), and a function to unsubscribe.
func (h *Hub) Subscribe(id uuid.UUID) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[uuid.UUID]map[chan struct{}]struct{}{}
	}
	if h.subs[id] == nil {
		h.subs[id] = map[chan struct{}]struct{}{}
	}
	h.subs[id][ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs[id], ch)
		if len(h.subs[id]) == 0 {
			delete(h.subs, id)
		}
		h.mu.Unlock()
	}
}

// OnAny calls f for every change of any reservation, with the row's version after it (f must not block).
func (h *Hub) OnAny(f func(id uuid.UUID, version int64)) {
	h.mu.Lock()
	h.any = append(h.any, f)
	h.mu.Unlock()
}

func (h *Hub) notify(id uuid.UUID, version int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	for _, f := range h.any {
		f(id, version)
	}
}

// notifyAll wakes every subscriber, after a reconnect.
func (h *Hub) notifyAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chs := range h.subs {
		for ch := range chs {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Run listens until ctx ends, reconnecting with backoff.
func (h *Hub) Run(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := h.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		d := Backoff(100*time.Millisecond, 5*time.Second, attempt)
		h.Log.Error(err, "LISTEN connection lost; waiters fall back to polling until it is back", "retryIn", d)
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		h.notifyAll()
	}
}

func (h *Hub) listen(ctx context.Context) error {
	conn, err := h.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A LISTENing connection must not go back to the pool: it would carry the LISTEN to another user.
	pgc := conn.Hijack()
	defer pgc.Close(context.Background())
	if _, err := pgc.Exec(ctx, "LISTEN "+reconcile.NotifyChannel); err != nil {
		return err
	}
	h.notifyAll()
	for {
		n, err := pgc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		// "<id> <state> <version>"
		f := strings.Fields(n.Payload)
		if len(f) == 0 {
			continue
		}
		id, err := uuid.Parse(f[0])
		if err != nil {
			continue
		}
		var version int64
		if len(f) == 3 {
			version, _ = strconv.ParseInt(f[2], 10, 64)
		}
		h.notify(id, version)
	}
}
