package reconcile

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecideJob(t *testing.T) {
	r := func(run int, state State, wanted bool, jobState, reason string) *Reservation {
		return &Reservation{Run: RunID{Cluster: "c", JobID: 1, Run: run}, Status: Status{State: state},
			Spec: Spec{Wanted: wanted, JobState: jobState, JobReason: reason}}
	}
	for _, tc := range []struct {
		name string
		r    *Reservation
		want JobAction
	}{
		{"requeued run ready, waiting out the delay", r(1, StateReady, true, "PENDING", "BeginTime"), JobBeginNow},
		{"first run with a begin time of its own", r(0, StateReady, true, "PENDING", "BeginTime"), JobLeaveAlone},
		{"requeued run not ready yet", r(1, StateWaiting, true, "PENDING", "BeginTime"), JobLeaveAlone},
		{"requeued run no longer wanted", r(1, StateReady, false, "PENDING", "BeginTime"), JobLeaveAlone},
		{"requeued run waiting for resources", r(1, StateReady, true, "PENDING", "Resources"), JobLeaveAlone},
		{"requeued run running", r(1, StateReady, true, "RUNNING", "None"), JobLeaveAlone},
	} {
		if got := DecideJob(tc.r); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// A served run that failed (its session closed under it) while its job still runs: the job is requeued (batch)
// or cancelled (interactive). Not a run that failed before it was served (its prolog fails on its own), nor one
// whose job ended or that was let go.
func TestDecideJobLostSession(t *testing.T) {
	lost := func(mod func(r *Reservation)) *Reservation {
		r := &Reservation{Run: RunID{Cluster: "c", JobID: 1}, Status: Status{State: StateFailed, ReadyAt: time.Unix(1700000000, 0),
			FailReason: "lost: session s is on agent a, which is closed"}, Spec: Spec{Wanted: true, JobState: "RUNNING"}}
		if mod != nil {
			mod(r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *Reservation
		want JobAction
	}{
		{"running job lost its session", lost(nil), JobLostSession},
		{"configuring job", lost(func(r *Reservation) { r.Spec.JobState = "CONFIGURING" }), JobLostSession},
		{"suspended job", lost(func(r *Reservation) { r.Spec.JobState = "SUSPENDED" }), JobLostSession},
		{"never served", lost(func(r *Reservation) { r.Status.ReadyAt = time.Time{} }), JobLeaveAlone},
		{"job completing", lost(func(r *Reservation) { r.Spec.JobState = "COMPLETING" }), JobLeaveAlone},
		{"job pending (requeued)", lost(func(r *Reservation) { r.Spec.JobState = "PENDING" }), JobLeaveAlone},
		{"let go", lost(func(r *Reservation) { r.Spec.Wanted = false }), JobLeaveAlone},
		{"run over", lost(func(r *Reservation) { r.Spec.RunOver = true }), JobLeaveAlone},
		{"released, not failed", lost(func(r *Reservation) { r.Status.State = StateReleased }), JobLeaveAlone},
		{"still releasing", lost(func(r *Reservation) { r.Status.State = StateReleasing }), JobLeaveAlone},
	} {
		if got := DecideJob(tc.r); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
	if LostSessionAction(true) != JobRequeue || LostSessionAction(false) != JobCancel {
		t.Errorf("batch -> requeue, interactive -> cancel")
	}
}

// A run is stranded only when its job is past its prolog (RUNNING), its reservation ready, its run not over, and
// its file has been missing for StrandedAfter: never a job still in its prolog, ended, or not served.
func TestStranded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	run := Tracked{Run: RunID{Cluster: "c", JobID: 7}, State: StateReady, JobState: "RUNNING"}
	require.True(t, WantsFile(run))
	require.True(t, Stranded(run, now.Add(-StrandedAfter), now))
	require.False(t, Stranded(run, now.Add(-StrandedAfter+time.Second), now), "missing for less than StrandedAfter")
	require.False(t, Stranded(run, time.Time{}, now), "never seen missing")
	for name, change := range map[string]func(*Tracked){
		"in its prolog":   func(t *Tracked) { t.JobState = "CONFIGURING" },
		"pending":         func(t *Tracked) { t.JobState = "PENDING" },
		"completing":      func(t *Tracked) { t.JobState = "COMPLETING" },
		"ended":           func(t *Tracked) { t.HasEnd = true },
		"run over":        func(t *Tracked) { t.RunOver = true },
		"not ready":       func(t *Tracked) { t.State = StateWaiting },
		"releasing":       func(t *Tracked) { t.State = StateReleasing },
		"unbound element": func(t *Tracked) { t.Run = RunID{Cluster: "c", ArrayJobID: 5, ArrayTaskID: 1} },
	} {
		r := run
		change(&r)
		require.False(t, WantsFile(r), name)
		require.False(t, Stranded(r, now.Add(-time.Hour), now), name)
	}
}
