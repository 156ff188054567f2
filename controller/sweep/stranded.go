package sweep

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// TrackedStore lists the open runs as the poller compares them with Slurm (store.Store).
type TrackedStore interface {
	Tracked(ctx context.Context) ([]reconcile.Tracked, error)
}

// Strands watches the state directory for stranded runs (reconcile.Stranded): runs whose job Slurm runs past its
// prolog with no session file. It remembers, between two looks, since when each run has wanted its file without
// one. It is the leader's, looked at with the file sweep.
//
// It names no run until it has seen, in the directory, the file of at least one run that wanted it: only then is
// it known to be the directory the hooks write to. A controller whose state-dir is a directory of its own host that
// the hooks never write to (a controller on another host, say) would otherwise take every running job for stranded.
type Strands struct {
	missing map[uuid.UUID]time.Time
	proven  bool
}

// Look lists the state directory and the open runs at now, and returns the runs stranded (reconcile.Stranded),
// and whether the directory is proven to be the hooks'.
func (s *Strands) Look(ctx context.Context, st TrackedStore, dir *session.StateDir, now time.Time) (stranded []reconcile.Tracked, proven bool, err error) {
	// The runs first, then the files: a file written between the two reads is seen, and a run that became RUNNING
	// after the list of runs is looked at next time.
	runs, err := st.Tracked(ctx)
	if err != nil {
		return nil, s.proven, fmt.Errorf("stranded runs: %w", err)
	}
	// Names only: whether a file is there is all this asks (the file sweep reads their headers).
	entries, err := os.ReadDir(dir.Path)
	if err != nil {
		return nil, s.proven, fmt.Errorf("stranded runs: %w", err)
	}
	type jobRun struct {
		job uint32
		run int
	}
	have := make(map[jobRun]bool, len(entries))
	for _, e := range entries {
		if job, run, ok := session.ParseFileName(e.Name()); ok {
			have[jobRun{job, run}] = true
		}
	}
	if s.missing == nil {
		s.missing = map[uuid.UUID]time.Time{}
	}
	wanting := make(map[uuid.UUID]bool)
	for _, t := range runs {
		if !reconcile.WantsFile(t) {
			continue
		}
		wanting[t.ID] = true
		if have[jobRun{t.Run.JobID, t.Run.Run}] {
			s.proven = true
			delete(s.missing, t.ID)
			continue
		}
		if _, seen := s.missing[t.ID]; !seen {
			s.missing[t.ID] = now
		}
	}
	for id := range s.missing {
		if !wanting[id] {
			delete(s.missing, id)
		}
	}
	if !s.proven {
		return nil, false, nil
	}
	for _, t := range runs {
		if since, ok := s.missing[t.ID]; ok && reconcile.Stranded(t, since, now) {
			stranded = append(stranded, t)
		}
	}
	return stranded, true, nil
}
