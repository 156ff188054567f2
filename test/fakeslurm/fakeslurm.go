// Package fakeslurm is a scripted slurmrestd for the controller's tests and benchmarks: the jobs a test sets, the
// update_time rule of the real one (a listing with nothing changed since `since` is Unchanged), and counts of the
// calls. It implements controller.Slurm. Faults are injected per call with Intercept, in the manner of
// controller-runtime's interceptor: errors, timeouts, stale listings. The real-Slurm path is tested end to end in
// test/e2e.
package fakeslurm

import (
	"context"
	"sync"
	"time"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Slurm is the scripted slurmrestd.
type Slurm struct {
	mu        sync.Mutex
	jobs      map[uint32]slurmrest.Job
	changed   time.Time
	lists     int
	gets      int
	states    int
	allStates int
	// legacy: no jobs/state endpoint, as slurmrestd of 22.05 (v0.0.38)
	legacy  bool
	updates []slurmrest.JobUpdate
	funcs   Funcs
}

// Funcs intercept calls. Each one that is set is called instead of the scripted behaviour, which it gets as next:
// it may fail, wait, change the answer, or pass the call through.
type Funcs struct {
	ListJobs  func(ctx context.Context, since time.Time, next func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error)
	GetJob    func(ctx context.Context, id uint32, next func(context.Context, uint32) (*slurmrest.Job, error)) (*slurmrest.Job, error)
	UpdateJob func(ctx context.Context, id uint32, u slurmrest.JobUpdate, next func(context.Context, uint32, slurmrest.JobUpdate) error) error
	JobStates func(ctx context.Context, ids []uint32, next func(context.Context, []uint32) ([]slurmrest.JobStatus, error)) ([]slurmrest.JobStatus, error)
}

// Intercept replaces the interceptors (the zero Funcs removes them).
func (f *Slurm) Intercept(fs Funcs) {
	f.mu.Lock()
	f.funcs = fs
	f.mu.Unlock()
}

// Hang is an interceptor body for a call that never answers: it returns when the caller gives up.
func Hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Listing is what a full listing returns now, to be replayed later as a stale one.
func (f *Slurm) Listing() slurmrest.JobList {
	l, _ := f.list(context.Background(), time.Time{})
	return l
}

// New has no jobs.
func New() *Slurm { return &Slurm{jobs: map[uint32]slurmrest.Job{}, changed: time.Now()} }

// JuiceJob is a job carrying req in admin_comment and comment, as job_submit.lua writes it.
func JuiceJob(id uint32, run int, state slurmrest.JobState, req string) slurmrest.Job {
	return slurmrest.Job{ID: id, Run: run, State: state, StateReason: "None", UserName: "alice", Partition: "debug",
		AdminComment: req, Comment: req, Priority: 100, Batch: true, SubmitTime: time.Now()}
}

// touch moves the listing's clock: the real one has one-second resolution, and a change always moves it forward.
func (f *Slurm) touch() { f.changed = f.changed.Add(time.Second) }

// Set lists (or replaces) jobs.
func (f *Slurm) Set(jobs ...slurmrest.Job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, j := range jobs {
		f.jobs[j.ID] = j
	}
	f.touch()
}

// SetRunning lists jobs first..first+n-1 as RUNNING Juice jobs (run 0) asking for req.
func (f *Slurm) SetRunning(first uint32, n int, req string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := 0; i < n; i++ {
		id := first + uint32(i)
		f.jobs[id] = JuiceJob(id, 0, slurmrest.StateRunning, req)
	}
	f.touch()
}

// Remove drops a job, as slurmctld does after MinJobAge.
func (f *Slurm) Remove(id uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.jobs, id)
	f.touch()
}

// Legacy makes it an API without the jobs/state endpoint (Slurm 22.05, v0.0.38): CanTrackStates says no and
// JobStates fails with slurmrest.ErrUnsupported.
func (f *Slurm) Legacy() {
	f.mu.Lock()
	f.legacy = true
	f.mu.Unlock()
}

// States counts JobStates calls.
func (f *Slurm) States() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.states
}

// Lists counts ListJobs calls.
func (f *Slurm) Lists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// Updates returns the updates asked for so far.
func (f *Slurm) Updates() []slurmrest.JobUpdate {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]slurmrest.JobUpdate(nil), f.updates...)
}

// Gets counts GetJob calls.
func (f *Slurm) Gets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

func (f *Slurm) ListJobs(ctx context.Context, since time.Time) (slurmrest.JobList, error) {
	f.mu.Lock()
	f.lists++
	fn := f.funcs.ListJobs
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, since, f.list)
	}
	return f.list(ctx, since)
}

func (f *Slurm) list(_ context.Context, since time.Time) (slurmrest.JobList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !since.IsZero() && !f.changed.After(since) {
		return slurmrest.JobList{Unchanged: true, LastUpdate: since}, nil
	}
	l := slurmrest.JobList{LastUpdate: f.changed, Jobs: make([]slurmrest.Job, 0, len(f.jobs))}
	for _, j := range f.jobs {
		l.Jobs = append(l.Jobs, j)
	}
	return l, nil
}

func (f *Slurm) GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error) {
	f.mu.Lock()
	f.gets++
	fn := f.funcs.GetJob
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, id, f.get)
	}
	return f.get(ctx, id)
}

func (f *Slurm) get(_ context.Context, id uint32) (*slurmrest.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		return nil, slurmrest.ErrNotFound
	}
	return &j, nil
}

// UpdateJob records the update; BeginNow lets a job waiting for its begin time go, and Comment sets the job's
// comment, as slurmctld does.
func (f *Slurm) UpdateJob(ctx context.Context, id uint32, u slurmrest.JobUpdate) error {
	f.mu.Lock()
	fn := f.funcs.UpdateJob
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, id, u, f.update)
	}
	return f.update(ctx, id, u)
}

func (f *Slurm) update(_ context.Context, id uint32, u slurmrest.JobUpdate) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates = append(f.updates, u)
	j, ok := f.jobs[id]
	if !ok {
		return slurmrest.ErrNotFound
	}
	if u.BeginNow && j.StateReason == "BeginTime" {
		j.StateReason = "None"
		f.jobs[id] = j
		f.touch()
	}
	if u.Comment != nil && *u.Comment != j.Comment {
		j.Comment = *u.Comment
		f.jobs[id] = j
		f.touch()
	}
	return nil
}

// CanTrackStates says whether JobStates works (not after Legacy).
func (f *Slurm) CanTrackStates(context.Context) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.legacy, nil
}

// JobStates answers as slurmctld's job-state RPC does: the state of each asked job it knows, an element of an
// array under its own job id and its task id (v0.0.42+), nothing for an unknown id.
func (f *Slurm) JobStates(ctx context.Context, ids []uint32) ([]slurmrest.JobStatus, error) {
	f.mu.Lock()
	f.states++
	fn := f.funcs.JobStates
	f.mu.Unlock()
	if fn != nil {
		return fn(ctx, ids, f.jobStates)
	}
	return f.jobStates(ctx, ids)
}

// AllJobStates answers with every job's state, as GET jobs/state/ without job_id.
func (f *Slurm) AllJobStates(ctx context.Context) ([]slurmrest.JobStatus, error) {
	f.mu.Lock()
	f.allStates++
	ids := make([]uint32, 0, len(f.jobs))
	for id := range f.jobs {
		ids = append(ids, id)
	}
	f.mu.Unlock()
	return f.jobStates(ctx, ids)
}

// AllStates counts AllJobStates calls.
func (f *Slurm) AllStates() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.allStates
}

func (f *Slurm) jobStates(_ context.Context, ids []uint32) ([]slurmrest.JobStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.legacy {
		return nil, slurmrest.ErrUnsupported
	}
	var out []slurmrest.JobStatus
	for _, id := range ids {
		j, ok := f.jobs[id]
		if !ok {
			continue
		}
		st := slurmrest.JobStatus{ID: j.ID, State: j.State, Flags: j.StateFlags}
		if j.Array != nil && j.Array.HasTask {
			st.Task, st.HasTask = j.Array.TaskID, true
		}
		out = append(out, st)
	}
	return out, nil
}
