package controller

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// JobActor is the one actor on Slurm's jobs: it carries out reconcile.DecideJob for each reservation it is
// handed (when the reconciler moved it, or the poller saw its job change). Asking twice is harmless: Slurm's next
// listing shows the change, and the decision then says to leave the job alone.
type JobActor struct {
	Store   *store.Store
	Slurm   Slurm
	Log     logr.Logger
	Metrics *Metrics
}

// Act decides for one reservation and acts.
func (a *JobActor) Act(ctx context.Context, id uuid.UUID) error {
	r, err := a.Store.Get(ctx, id)
	if errors.Is(err, reconcile.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	switch reconcile.DecideJob(&r) {
	case reconcile.JobBeginNow:
		err := a.Slurm.UpdateJob(ctx, r.Run.JobID, slurmrest.JobUpdate{BeginNow: true})
		a.Metrics.observeSlurm("update_job", err)
		if err != nil {
			return fmt.Errorf("let job %d begin now: %w", r.Run.JobID, err)
		}
		a.Log.Info("requeued run has its session: letting it begin now", "job", r.Run.JobID, "run", r.Run.Run)
	}
	return nil
}
