// Package notify turns PostgreSQL's NOTIFY on store.NotifyChannel into wake-ups inside a controller process: a
// waiting prolog wakes the moment its reservation changes, whichever replica wrote the change, and the leader's
// actors hear of reservations that observers created or changed on any replica.
//
// NOTIFY is an optimisation, never the only path. A pooler in transaction mode drops LISTEN, and a connection
// can break; notifications sent while the hub is not listening are lost. So everyone who waits on the hub also
// re-reads on a timer, and after every (re)subscribe the hub tells its OnConnect callbacks to re-list what they
// may have missed, as client-go re-lists after a watch reconnects.
package notify

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// A Change is one notification: which reservation, which half of it changed, and for a status change the state
// it moved to.
type Change struct {
	ID    uuid.UUID
	Kind  store.Kind
	State reconcile.State
}

// Hub listens on one connection for one cluster's changes and fans them out.
type Hub struct {
	Pool    *pgxpool.Pool
	Cluster string
	Log     logr.Logger
	// Connect, when set, replaces taking a connection from Pool for LISTEN (tests hold a reconnect back with it).
	Connect func(ctx context.Context) (*pgx.Conn, error)

	mu        sync.Mutex
	subs      map[uuid.UUID]map[chan struct{}]struct{}
	onChange  map[int]func(Change)
	onConnect map[int]func()
	next      int
}

// Subscribe returns a channel that receives a value whenever reservation id changes, or when changes may have
// been missed (coalesced: one pending value at most), and a function to unsubscribe.
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

// OnChange calls f for every change of any of the cluster's reservations (f must not block). It returns a
// function that removes f.
func (h *Hub) OnChange(f func(Change)) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.onChange == nil {
		h.onChange = map[int]func(Change){}
	}
	h.next++
	n := h.next
	h.onChange[n] = f
	return func() { h.mu.Lock(); delete(h.onChange, n); h.mu.Unlock() }
}

// OnConnect calls f each time the hub has (re)subscribed: whatever changed while it was not listening is lost, so
// f re-lists (f must not block). It returns a function that removes f.
func (h *Hub) OnConnect(f func()) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.onConnect == nil {
		h.onConnect = map[int]func(){}
	}
	h.next++
	n := h.next
	h.onConnect[n] = f
	return func() { h.mu.Lock(); delete(h.onConnect, n); h.mu.Unlock() }
}

func (h *Hub) dispatch(c Change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[c.ID] {
		wake(ch)
	}
	for _, f := range h.onChange {
		f(c)
	}
}

// connected wakes every waiter and every re-lister: what changed while the hub was away is unknown.
func (h *Hub) connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, chs := range h.subs {
		for ch := range chs {
			wake(ch)
		}
	}
	for _, f := range h.onConnect {
		f()
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// reconnect is how long the hub waits before listening again after a failure.
var reconnect = backoff.Policy{Base: 100 * time.Millisecond, Max: 5 * time.Second}

// Run listens until ctx ends, reconnecting with backoff.
func (h *Hub) Run(ctx context.Context) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		err := h.listen(ctx, func() { attempt = 0 })
		if ctx.Err() != nil {
			return
		}
		d := reconnect.Delay(attempt)
		h.Log.Error(err, "LISTEN connection lost; waiters fall back to re-reading until it is back", "retryIn", d)
		if backoff.SleepFor(ctx, d) != nil {
			return
		}
	}
}

func (h *Hub) listen(ctx context.Context, up func()) error {
	conn, err := h.conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+store.NotifyChannel); err != nil {
		return err
	}
	up()
	h.connected()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		c, ok := store.ParseNotification(n.Payload)
		if !ok || c.Cluster != h.Cluster {
			continue
		}
		h.dispatch(Change{ID: c.ID, Kind: c.Kind, State: c.State})
	}
}

func (h *Hub) conn(ctx context.Context) (*pgx.Conn, error) {
	if h.Connect != nil {
		return h.Connect(ctx)
	}
	c, err := h.Pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// A LISTENing connection must not go back to the pool: it would carry the LISTEN to another user.
	return c.Hijack(), nil
}
