package slurmrest

import (
	"strings"
	"time"
)

// JobState is the state of a job as the reconciler sees it, the same for every API version.
//
// It is the job's base state, except that two transitional flags win over the base state, because
// v0.0.38 reports them instead of it and the reconciler must see them the same way everywhere:
// CONFIGURING (nodes allocated, PrologSlurmctld running) gives Configuring, and COMPLETING (the job
// ended, its processes or epilog are not done yet) gives Completing. All flags are also kept in
// Job.StateFlags.
type JobState string

// Job states.
const (
	StatePending     JobState = "PENDING"
	StateConfiguring JobState = "CONFIGURING"
	StateRunning     JobState = "RUNNING"
	StateSuspended   JobState = "SUSPENDED"
	StateCompleting  JobState = "COMPLETING"
	StateCompleted   JobState = "COMPLETED"
	StateFailed      JobState = "FAILED"
	StateCancelled   JobState = "CANCELLED"
	StateTimeout     JobState = "TIMEOUT"
	StateNodeFail    JobState = "NODE_FAIL"
	StatePreempted   JobState = "PREEMPTED"
	StateOutOfMemory JobState = "OUT_OF_MEMORY"
	StateBootFail    JobState = "BOOT_FAIL"
	StateDeadline    JobState = "DEADLINE"
)

// IsFinished reports whether the job has ended and all its processes are gone: a terminal base state
// without the COMPLETING flag.
func (s JobState) IsFinished() bool {
	switch s {
	case StateCompleted, StateFailed, StateCancelled, StateTimeout, StateNodeFail, StatePreempted,
		StateOutOfMemory, StateBootFail, StateDeadline:
		return true
	}
	return false
}

// IsActive reports whether the job holds (or is about to hold) nodes: configuring, running,
// suspended or completing.
func (s JobState) IsActive() bool {
	switch s {
	case StateConfiguring, StateRunning, StateSuspended, StateCompleting:
		return true
	}
	return false
}

func (s JobState) String() string { return string(s) }

// baseStates are the values that can be a job's base state (JOB_STATE_BASE in slurm.h).
var baseStates = map[string]JobState{
	"PENDING": StatePending, "RUNNING": StateRunning, "SUSPENDED": StateSuspended,
	"COMPLETED": StateCompleted, "CANCELLED": StateCancelled, "FAILED": StateFailed,
	"TIMEOUT": StateTimeout, "NODE_FAIL": StateNodeFail, "PREEMPTED": StatePreempted,
	"BOOT_FAIL": StateBootFail, "DEADLINE": StateDeadline, "OUT_OF_MEMORY": StateOutOfMemory,
}

// normalizeState turns the words slurmrestd sent (one string on v0.0.3x, base state first then flags
// on v0.0.40+) into the model's state and flags.
func normalizeState(words []string) (JobState, []string) {
	var base JobState
	var flags []string
	for _, w := range words {
		w = strings.ToUpper(strings.TrimSpace(w))
		if w == "" {
			continue
		}
		if b, ok := baseStates[w]; ok && base == "" {
			base = b
			continue
		}
		flags = append(flags, w)
	}
	state := base
	for _, f := range flags {
		switch f {
		case "COMPLETING":
			state = StateCompleting
		case "CONFIGURING":
			if state != StateCompleting {
				state = StateConfiguring
			}
		}
	}
	if state == "" {
		// Only flags (v0.0.38 prints e.g. "REQUEUED" or "SPECIAL_EXIT" instead of the base state).
		switch {
		case hasWord(flags, "REQUEUED"), hasWord(flags, "REQUEUE_HOLD"), hasWord(flags, "REQUEUE_FED"),
			hasWord(flags, "RESV_DEL_HOLD"), hasWord(flags, "SPECIAL_EXIT"):
			state = StatePending
		case hasWord(flags, "RESIZING"), hasWord(flags, "SIGNALING"):
			state = StateRunning
		case hasWord(flags, "STAGE_OUT"):
			state = StateCompleting
		case hasWord(flags, "LAUNCH_FAILED"):
			state = StateFailed
		case len(flags) > 0:
			state = JobState(flags[0])
		}
	}
	return state, flags
}

func hasWord(list []string, w string) bool {
	for _, x := range list {
		if x == w {
			return true
		}
	}
	return false
}

// ExitStatus is a job's exit status, decoded from the raw wait status (v0.0.3x) or from the verbose
// exit code object (v0.0.40+).
type ExitStatus struct {
	// Exited is true when the batch script ended by itself (WIFEXITED); Code is then its exit code.
	Exited bool
	Code   int
	// Signal is the signal that ended it when it did not exit by itself (WIFSIGNALED).
	Signal     int
	CoreDumped bool
}

// Raw returns the status as a wait(2) status word, as slurmctld stores it (exit 3 → 768).
func (e ExitStatus) Raw() int {
	if e.Exited {
		return (e.Code & 0xff) << 8
	}
	raw := e.Signal & 0x7f
	if e.CoreDumped {
		raw |= 0x80
	}
	return raw
}

// ExitStatusFromRaw decodes a wait(2) status word.
func ExitStatusFromRaw(raw int) ExitStatus {
	if raw&0x7f == 0 {
		return ExitStatus{Exited: true, Code: (raw >> 8) & 0xff}
	}
	return ExitStatus{Signal: raw & 0x7f, CoreDumped: raw&0x80 != 0}
}

// Job is what the reconciler needs to know about a Slurm job, whatever the API version.
type Job struct {
	ID uint32
	// Run is the job's restart count: a requeued job is a new run (key runs by ID and Run).
	Run         int
	State       JobState
	StateFlags  []string
	StateReason string
	UserName    string // empty on v0.0.36, which does not fill it
	Account     string // the account the job is charged to (its default account when it named none)
	UserID      uint32
	Partition   string
	Nodes       string
	Batch       bool
	Name        string
	Comment     string
	// AdminComment can only be set by an operator (or job_submit.lua): the job's owner cannot change it.
	AdminComment string
	// Priority is 0 while the job is held.
	Priority     uint64
	SubmitTime   time.Time
	EligibleTime time.Time
	StartTime    time.Time
	EndTime      time.Time
	// ExitCode is set once the job has ended (State.IsFinished() or Completing).
	ExitCode ExitStatus
	// Array is set for a record of a job array (sbatch --array).
	Array *ArrayInfo
}

// ArrayInfo places a job record in its array. slurmctld keeps an array's pending elements in one record (the
// remainder: the array's own job id, no task id, the pending task ids in Pending) and splits each element off
// into a record of its own, with a fresh job id and its task id, when it starts it (or holds, or updates it
// alone); the last element takes the remainder's record and so the array's job id.
type ArrayInfo struct {
	// JobID is the array's job id (the first record's).
	JobID uint32
	// TaskID is the element's task id; meaningful only when HasTask.
	TaskID  uint32
	HasTask bool
	// Pending is slurmctld's text of the task ids still pending in the remainder ("3-200", "1,5-9:2%4").
	Pending string
}

// Remainder reports whether the record is an array's pending remainder (no task id of its own): a record of
// elements that are not runs yet.
func (j *Job) Remainder() bool { return j.Array != nil && !j.Array.HasTask }

// noTask is Slurm's NO_VAL (and above): a task id that is not set.
const noTask = 0xfffffffe

func arrayInfo(arrayJobID int64, taskID int64, hasTask bool, pending string) *ArrayInfo {
	if arrayJobID <= 0 || arrayJobID >= noTask {
		return nil
	}
	if taskID < 0 || taskID >= noTask {
		hasTask = false
	}
	a := &ArrayInfo{JobID: uint32(arrayJobID), HasTask: hasTask, Pending: pending}
	if hasTask {
		a.TaskID = uint32(taskID)
	}
	return a
}

// Held reports whether the job is pending with priority 0 because of a hold.
func (j *Job) Held() bool {
	return j.State == StatePending && j.Priority == 0 &&
		(j.StateReason == "JobHeldUser" || j.StateReason == "JobHeldAdmin")
}

// JobList is the result of ListJobs.
type JobList struct {
	// Jobs holds every job slurmctld knows when the listing changed; it is empty when Unchanged.
	Jobs []Job
	// LastUpdate is the value to pass as `since` on the next ListJobs call.
	LastUpdate time.Time
	// Unchanged is true when no job changed since `since`: the caller keeps its last snapshot.
	Unchanged bool
}

// JobUpdate is a change to a job; nil fields are left alone.
type JobUpdate struct {
	Comment      *string
	AdminComment *string
	// Hold true holds the job (priority 0), false releases it.
	Hold *bool
	// BeginNow makes the job eligible now (clears a begin time in the future, e.g. after a requeue).
	// v0.0.3x send "now" (the server's clock); v0.0.40+ need a number: the client's clock.
	BeginNow bool
}

// JobSubmission describes a batch job for SubmitJob (used by tests and the demo).
type JobSubmission struct {
	Script       string
	Name         string
	Partition    string
	Comment      string
	AdminComment string
	// Environment holds NAME=value entries; a minimal PATH is used when empty.
	Environment []string
	// WorkDir is the job's working directory; "/tmp" when empty.
	WorkDir string
	// StdOut is the batch script's output file; "/dev/null" when empty.
	StdOut string
	Hold   bool
	// TimeLimit is rounded up to whole minutes; 0 means the partition's default.
	TimeLimit time.Duration
	// Begin is the earliest start (sbatch --begin); zero: at once.
	Begin time.Time
}

func (s *JobSubmission) env() []string {
	if len(s.Environment) > 0 {
		return s.Environment
	}
	return []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
}

func (s *JobSubmission) workDir() string {
	if s.WorkDir != "" {
		return s.WorkDir
	}
	return "/tmp"
}

func (s *JobSubmission) stdOut() string {
	if s.StdOut != "" {
		return s.StdOut
	}
	return "/dev/null"
}

func (s *JobSubmission) timeLimitMinutes() int64 {
	if s.TimeLimit <= 0 {
		return 0
	}
	return int64((s.TimeLimit + time.Minute - 1) / time.Minute)
}

func unixOrZero(n int64) time.Time {
	if n <= 0 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// JobStatus is one job's entry in a JobStates reply: only what slurmctld's job-state RPC carries, its state. No
// reason, restart count, hold or request: a caller that sees a state it did not expect asks GetJob for the rest.
type JobStatus struct {
	// ID is the number before the underscore of the reply's job_id: the job's id; for an array's element its own job
	// id on v0.0.42+, but the array's job id on v0.0.40 and v0.0.41 (seen on 24.11.5): match an element on both.
	ID uint32
	// Task is the array task id when the entry is an array's element (HasTask); an array's pending remainder
	// is listed as one entry per pending task, each with the remainder's job id.
	Task    uint32
	HasTask bool
	State   JobState
	// Flags are the state words after the base state (CONFIGURING, COMPLETING, REQUEUED, ...).
	Flags []string
}
