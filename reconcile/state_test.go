package reconcile

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestStateMachineTable(t *testing.T) {
	now := time.Unix(1700000000, 0)
	type step struct {
		ev   Event
		want State
	}
	for _, tc := range []struct {
		name      string
		steps     []step
		wantFail  string
		requested bool
	}{
		{name: "happy path then the job ends", requested: true, steps: []step{
			{EventRequest, StateRequesting}, {EventQueued, StateWaiting}, {EventQueued, StateWaiting},
			{EventActive, StateReady}, {EventUnwanted, StateReleasing}, {EventClosed, StateReleased}}},
		{name: "cancelled while pending, before any request", steps: []step{{EventUnwanted, StateReleased}}},
		{name: "vanished while requesting", requested: true, steps: []step{
			{EventRequest, StateRequesting}, {EventUnwanted, StateReleasing}, {EventClosed, StateReleased}}},
		{name: "refused outright by the controller", requested: true, wantFail: "no capacity", steps: []step{
			{EventRequest, StateRequesting}, {EventFail, StateReleasing}, {EventClosed, StateFailed}}},
		{name: "failed before asking", wantFail: "no capacity", steps: []step{{EventFail, StateFailed}}},
		{name: "session closed by the controller while waiting", requested: true, wantFail: "no capacity", steps: []step{
			{EventRequest, StateRequesting}, {EventQueued, StateWaiting}, {EventClosed, StateReleasing}, {EventClosed, StateFailed}}},
		{name: "session lost while ready", requested: true, wantFail: "no capacity", steps: []step{
			{EventRequest, StateRequesting}, {EventQueued, StateWaiting}, {EventActive, StateReady},
			{EventClosed, StateReleasing}, {EventUnwanted, StateReleasing}, {EventClosed, StateFailed}}},
		{name: "an ended run's session handed on", requested: true, steps: []step{
			{EventRequest, StateRequesting}, {EventQueued, StateWaiting}, {EventActive, StateReady},
			{EventUnwanted, StateReleasing}, {EventHanded, StateReleased}}},
		{name: "a session taken from a like run that ended", steps: []step{
			{EventTaken, StateReady}, {EventUnwanted, StateReleasing}, {EventClosed, StateReleased}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reservation{ID: uuid.New(), Status: Status{State: StatePending}}
			for i, s := range tc.steps {
				reason := "because " + string(s.ev)
				if s.ev == EventFail || s.ev == EventClosed {
					reason = "no capacity"
				}
				tr, err := Apply(r, s.ev, reason, now)
				require.NoError(t, err, "step %d", i)
				require.Equal(t, s.want, r.Status.State, "step %d (%s)", i, s.ev)
				require.Equal(t, s.want, tr.To)
			}
			require.Equal(t, tc.wantFail, r.Status.FailReason)
			require.Equal(t, tc.requested, r.Status.Requested)
			require.True(t, r.Status.State.Final())
		})
	}
}

// Every (state, event) pair not in the table is refused and changes nothing; final states take no event.
func TestStateMachineRefusesIllegalEvents(t *testing.T) {
	events := []Event{EventRequest, EventQueued, EventActive, EventUnwanted, EventFail, EventClosed, EventHanded, EventTaken}
	allowed := 0
	for _, s := range States {
		for _, ev := range events {
			r := &Reservation{Status: Status{State: s}}
			_, err := Apply(r, ev, "x", time.Now())
			if _, ok := next[s][ev]; ok {
				require.NoError(t, err)
				allowed++
				continue
			}
			require.Error(t, err, "%s + %s", s, ev)
			require.Equal(t, s, r.Status.State)
		}
	}
	require.Equal(t, 20, allowed)
	for _, s := range []State{StateReleased, StateFailed} {
		require.Empty(t, next[s])
	}
}

// A run whose session failed it never hands that session on.
func TestAFailedRunsSessionIsNotHandedOn(t *testing.T) {
	r := &Reservation{ID: uuid.New(), Status: Status{State: StateReady}}
	_, err := Apply(r, EventClosed, "the Juice Controller ended session s1 while the job held it", time.Now())
	require.NoError(t, err)
	require.Equal(t, StateReleasing, r.Status.State)
	_, err = Apply(r, EventHanded, "x", time.Now())
	require.ErrorContains(t, err, "not handed on")
	require.Equal(t, StateReleasing, r.Status.State)
}
