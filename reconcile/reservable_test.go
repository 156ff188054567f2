package reconcile

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every way a run's reservations stand, and what Reservable makes of them. The plan's table (reconcile/plan) checks
// the same cases through the poller's whole decision: which reservations are a run's, and the look-ahead.
func TestReservable(t *testing.T) {
	t.Parallel()
	rec := func(state State, over bool) Tracked { return Tracked{State: state, RunOver: over} }
	for _, c := range []struct {
		name    string
		records []Tracked
		want    Standing
	}{
		{"a first run: no reservation yet", nil, Free},
		{"pending", []Tracked{rec(StatePending, false)}, Live},
		{"requesting", []Tracked{rec(StateRequesting, false)}, Live},
		{"waiting", []Tracked{rec(StateWaiting, false)}, Live},
		{"ready", []Tracked{rec(StateReady, false)}, Live},
		{"releasing, the run still open", []Tracked{rec(StateReleasing, false)}, Live},
		{"releasing, the run over", []Tracked{rec(StateReleasing, true)}, Live},
		{"failed", []Tracked{rec(StateFailed, false)}, Over},
		{"released, the run over (ended, requeued, gone)", []Tracked{rec(StateReleased, true)}, Over},
		{"released while held: reserved again once let go", []Tracked{rec(StateReleased, false)}, Free},
		{"held and let go twice", []Tracked{rec(StateReleased, false), rec(StateReleased, false)}, Free},
		{"held, let go, reserved again", []Tracked{rec(StateReleased, false), rec(StateWaiting, false)}, Live},
		{"held, let go, then failed", []Tracked{rec(StateReleased, false), rec(StateFailed, false)}, Over},
		{"held, let go, then ended", []Tracked{rec(StateReleased, false), rec(StateReleased, true)}, Over},
		// Prune deletes a final reservation after the retention: what remains of the run is nothing.
		{"failed, then pruned", nil, Free},
	} {
		require.Equal(t, c.want, Reservable(c.records), c.name)
	}
}

// Only a hold leaves the run open: its release is the one that does not make the run Over.
func TestReleaseEndsRun(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		release Release
		want    Standing
	}{{ReleaseEnded, Over}, {ReleaseRequeued, Over}, {ReleaseGone, Over}, {ReleaseHeld, Free}} {
		released := Tracked{State: StateReleased, RunOver: c.release.EndsRun()}
		require.Equal(t, c.want, Reservable([]Tracked{released}), "release %d", c.release)
	}
}
