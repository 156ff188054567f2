package reconcile

import "testing"

func TestDecideJob(t *testing.T) {
	r := func(run int, state State, wanted bool, jobState, reason string) *Reservation {
		return &Reservation{Run: RunID{"c", 1, run}, Status: Status{State: state},
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
