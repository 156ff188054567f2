package sweep

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/session/filename"
)

// RunningStore lists the ready runs of the jobs Slurm runs (store.Store): as many as the GPUs in use.
type RunningStore interface {
	RunningReady(ctx context.Context) ([]reconcile.Tracked, error)
}

// Strands watches the state directory for stranded runs (reconcile.Stranded): runs whose job Slurm runs past its
// prolog with no session file. It remembers, between two looks, since when each run has wanted its file without
// one. It is the leader's, looked at every half StrandedAfter (Controller.endStranded), so that a stranded job is
// ended within one and a half StrandedAfter of the first look that saw it without its file.
//
// It names no run until the directory is proven to be the one the hooks write to: it has seen there the file of a
// run that wanted it, now or before (filename.HooksMark). A controller whose state-dir is a directory of its own host
// that the hooks never write to (a controller on another host, say) would otherwise take every running job for
// stranded. The proof is the file filename.HooksMark: the prolog leaves it beside the session files it writes, and
// the watch too once it has seen a running job's file, so that the proof outlives the process and passes to the
// next leader. After a restart of slurmctld on 26.05 every running Juice job may be stranded at once, with no file
// left to prove the directory by (seen in chaos runs: 13 jobs and none other running).
type Strands struct {
	missing map[uuid.UUID]time.Time
	proven  bool
}

// Proven reports whether the directory is proven the hooks' (by the last Look).
func (s *Strands) Proven() bool { return s.proven }

// Look lists the state directory and the open runs at now, and returns the runs stranded (reconcile.Stranded),
// and whether the directory is proven to be the hooks'.
func (s *Strands) Look(ctx context.Context, st RunningStore, dir *session.StateDir, now time.Time) (stranded []reconcile.Tracked, proven bool, err error) {
	// The runs first, then the files: a file written between the two reads is seen, and a run that became RUNNING
	// after the list of runs is looked at next time.
	runs, err := st.RunningReady(ctx)
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
	marked := false
	for _, e := range entries {
		if e.Name() == filename.HooksMark {
			marked = true
		}
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
	if marked {
		s.proven = true
	} else if s.proven {
		// Proven now: said in the directory for the next process. A failure only leaves the proof to be made again.
		if f, err := os.OpenFile(filepath.Join(dir.Path, filename.HooksMark), os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			f.Close()
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
