package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
)

// Unwant is the one way a reservation becomes unwanted, for the poller, the epilog and the admin alike; over
// says that the run itself is over (see Reservation.RunOver). A conflicting write is retried on the fresh row, so
// an unwanted run is never missed.
func Unwant(ctx context.Context, store reconcile.Store, r *reconcile.Reservation, reason, jobState string, over bool, enqueue func(uuid.UUID)) error {
	for attempt := 0; attempt < 5; attempt++ {
		if r.State.Final() || !r.Wanted && r.State != reconcile.StatePending {
			if over && !r.RunOver {
				// Already let go (held, say) and now over: remember it, so the run is not reserved again.
				r.RunOver = true
				if err := store.Save(ctx, r, nil); err != nil && !errors.Is(err, reconcile.ErrConflict) {
					return err
				}
			}
			return nil
		}
		r.Wanted = false
		r.RunOver = r.RunOver || over
		if jobState != "" {
			r.JobState = jobState
		}
		t, err := reconcile.Apply(r, reconcile.EventUnwanted, reason, time.Now())
		if err != nil {
			return err
		}
		err = store.Save(ctx, r, &t)
		if err == nil {
			if enqueue != nil {
				enqueue(r.ID)
			}
			return nil
		}
		if !errors.Is(err, reconcile.ErrConflict) {
			return err
		}
		fresh, err := store.Get(ctx, r.ID)
		if err != nil {
			return err
		}
		*r = fresh
	}
	return fmt.Errorf("reservation %s: gave up marking it unwanted after repeated conflicts", r.ID)
}
