// Package leader elects the one replica that reconciles, the holder of a lease row in PostgreSQL (Elector), and
// runs what that replica does while it leads (Term).
package leader

import (
	"context"
	"time"

	"github.com/go-logr/logr"
)

// Leases is where the lease row lives (store.Store).
type Leases interface {
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Elector holds the leader lease row. Only the leader polls Slurm and reconciles; every replica serves the hook
// API. The lease is renewed every Renew; a leader that fails to renew, or that has not renewed for TTL, stops
// leading at once, before another replica can take the expired lease, so two leaders never act together (as
// long as clocks drift by less than TTL - Renew).
type Elector struct {
	Leases Leases
	Name   string
	Holder string
	TTL    time.Duration
	Renew  time.Duration
	Log    logr.Logger
	// OnLead runs while this replica leads; its context ends when leadership is lost or Run's context ends.
	OnLead func(ctx context.Context)
	// Leading, when set, hears each change of leadership (for metrics).
	Leading func(bool)
	// KeepLease, when it returns true at the end, leaves the lease to expire instead of giving it up: what a
	// replica killed with -9 does, for tests of the handover.
	KeepLease func() bool
}

// Run campaigns until ctx ends, then gives the lease up so a successor need not wait for it to expire.
func (e *Elector) Run(ctx context.Context) {
	t := time.NewTicker(e.Renew)
	defer t.Stop()
	var stop context.CancelFunc
	var done chan struct{}
	var renewed time.Time
	stopLeading := func(why string) {
		if stop == nil {
			return
		}
		e.Log.Info("stopping leading", "why", why)
		stop()
		<-done
		stop, done = nil, nil
		e.leading(false)
	}
	defer func() {
		stopLeading("shutting down")
		if e.KeepLease != nil && e.KeepLease() {
			return
		}
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := e.Leases.ReleaseLease(rctx, e.Name, e.Holder); err != nil {
			e.Log.Error(err, "cannot give up the lease; it expires by itself", "ttl", e.TTL)
		}
	}()
	for {
		actx, cancel := context.WithTimeout(ctx, e.Renew)
		ok, err := e.Leases.AcquireLease(actx, e.Name, e.Holder, e.TTL)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			stopLeading("cannot renew the lease: " + err.Error())
			e.Log.Error(err, "lease")
		case !ok:
			stopLeading("another replica holds the lease")
		default:
			renewed = time.Now()
			if stop == nil {
				e.Log.Info("leading", "holder", e.Holder, "ttl", e.TTL)
				e.leading(true)
				lctx, cancelLead := context.WithCancel(ctx)
				stop = cancelLead
				done = make(chan struct{})
				go func() {
					defer close(done)
					e.OnLead(lctx)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if stop != nil && time.Since(renewed) > e.TTL-e.Renew/2 {
			stopLeading("the lease was not renewed in time")
		}
	}
}

func (e *Elector) leading(on bool) {
	if e.Leading != nil {
		e.Leading(on)
	}
}
