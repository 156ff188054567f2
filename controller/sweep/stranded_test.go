package sweep

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/session/filename"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

var _ RunningStore = (*store.Store)(nil)

type runningStore []reconcile.Tracked

func (t runningStore) RunningReady(context.Context) ([]reconcile.Tracked, error) { return t, nil }

// A run whose job runs past its prolog without its session file is named once it has gone StrandedAfter without
// it; one whose file is there, or comes back, is not; and nothing is named until the directory has shown the file
// of some running run (a directory the hooks do not write to would make every job stranded).
func TestStrandsNamesARunningJobWithoutItsFile(t *testing.T) {
	dir := t.TempDir()
	sd := &session.StateDir{Path: dir}
	put := func(job uint32, run int) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, session.FileName(session.Binding{JobID: job, Run: run})), []byte("x"), 0o600))
	}
	running := func(job uint32) reconcile.Tracked {
		return reconcile.Tracked{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: job}, State: reconcile.StateReady, JobState: "RUNNING"}
	}
	a, b := running(1), running(2)
	inProlog := running(3)
	inProlog.JobState = "CONFIGURING"
	st := runningStore{a, b, inProlog}
	ctx, now := context.Background(), time.Unix(1_800_000_000, 0)

	var s Strands
	_, proven, err := s.Look(ctx, st, sd, now)
	require.NoError(t, err)
	require.False(t, proven, "no running job's file seen yet")
	got, proven, err := s.Look(ctx, st, sd, now.Add(2*reconcile.StrandedAfter))
	require.NoError(t, err)
	require.False(t, proven)
	require.Empty(t, got, "not proven: nothing is named, however long the files are missing")

	put(1, 0) // job 1's prolog wrote its file: the directory is the hooks'
	got, proven, err = s.Look(ctx, st, sd, now.Add(3*reconcile.StrandedAfter))
	require.NoError(t, err)
	require.True(t, proven)
	require.Equal(t, []reconcile.Tracked{b}, got, "job 2 missed its file since the first look")

	put(2, 0)
	got, _, err = s.Look(ctx, st, sd, now.Add(4*reconcile.StrandedAfter))
	require.NoError(t, err)
	require.Empty(t, got, "its file is there now")

	require.NoError(t, os.Remove(filepath.Join(dir, session.FileName(session.Binding{JobID: 2}))))
	t0 := now.Add(5 * reconcile.StrandedAfter)
	got, _, err = s.Look(ctx, st, sd, t0)
	require.NoError(t, err)
	require.Empty(t, got, "missing again: the clock starts again")
	got, _, err = s.Look(ctx, st, sd, t0.Add(reconcile.StrandedAfter-time.Second))
	require.NoError(t, err)
	require.Empty(t, got)
	got, _, err = s.Look(ctx, st, sd, t0.Add(reconcile.StrandedAfter))
	require.NoError(t, err)
	require.Equal(t, []reconcile.Tracked{b}, got)

	// The proof is left in the directory: a new watch (the next leader, after a restart) looks at once, although
	// no running job has its file now.
	_, err = os.Stat(filepath.Join(dir, filename.HooksMark))
	require.NoError(t, err, "the marker")
	require.NoError(t, os.Remove(filepath.Join(dir, session.FileName(session.Binding{JobID: 1}))))
	var next Strands
	_, proven, err = next.Look(ctx, st, sd, t0)
	require.NoError(t, err)
	require.True(t, proven, "proven by the marker")
	got, _, err = next.Look(ctx, st, sd, t0.Add(reconcile.StrandedAfter))
	require.NoError(t, err)
	require.ElementsMatch(t, []reconcile.Tracked{a, b}, got, "every running job without its file, once proven")

	// The job ended meanwhile (the epilog removed its file): forgotten.
	ended := b
	ended.JobState = "COMPLETING"
	got, _, err = s.Look(ctx, runningStore{a, ended, inProlog}, sd, t0.Add(2*reconcile.StrandedAfter))
	require.NoError(t, err)
	require.Empty(t, got)
	require.NotContains(t, s.missing, b.ID, "the ended job is forgotten")
}
