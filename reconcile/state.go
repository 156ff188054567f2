package reconcile

import (
	"fmt"
	"time"
)

// The reservation state machine. Every reservation of a run moves only along these edges:
//
//	pending ──request──► requesting ──queued──► waiting ──active──► ready
//	   │                     │                     │                  │
//	   │ unwanted            │ unwanted / fail     │ unwanted / fail  │ unwanted / fail
//	   ▼                     ▼                     ▼                  ▼
//	released ◄──closed── releasing ◄──────────────┴──────────────────┘
//	                         │
//	                         └──closed, after a failure──► failed
//
// Hand-off (handoff.go) joins two reservations of like runs in one write: the ended run's, releasing, goes to
// released without a cancel (handed), and the next run's, pending, goes to ready on that session (taken).
//
// pending may also wait (stay pending, saying why in Reason): a user at the site policy's cap on GPUs in a pool.
// Only pending fails straight to failed: no request was sent, so no session can exist (the site policy refused
// the run). Every later failure, a refusal in requesting too (no capacity ever, unknown pool), goes through
// releasing, since a request with the run's key may have left a session behind.
//
// released and failed are final. A failure that holds a session passes through releasing, with FailReason
// set, so a session is cancelled before the run is called failed: the prolog already treats such a run as
// failed, and nothing is leaked on the way.
type State string

const (
	StatePending    State = "pending"    // wanted; nothing asked of Juice yet
	StateRequesting State = "requesting" // intent committed: a request with our key may be at the controller
	StateWaiting    State = "waiting"    // the controller has a session for us, queued or assigned
	StateReady      State = "ready"      // the session is active and its sealed file stored
	StateReleasing  State = "releasing"  // the session must be cancelled
	StateReleased   State = "released"   // done: the session was cancelled or never existed
	StateFailed     State = "failed"     // the run could not be served; Reason says why
)

// States lists every state in the order of the happy path.
var States = []State{StatePending, StateRequesting, StateWaiting, StateReady, StateReleasing, StateReleased, StateFailed}

// Final reports whether nothing more happens to a reservation in this state.
func (s State) Final() bool { return s == StateReleased || s == StateFailed }

// Serving reports whether a reservation in this state holds, or is getting, a session for its run: the states
// that an unwanted run leaves at once.
func (s State) Serving() bool {
	return s == StatePending || s == StateRequesting || s == StateWaiting || s == StateReady
}

// An Event moves a reservation from one state to the next.
type Event string

const (
	EventRequest  Event = "request"  // we are about to ask the controller (committed before we ask)
	EventWait     Event = "wait"     // not asked yet, and why: the site policy's cap on one user's GPUs in a pool
	EventQueued   Event = "queued"   // the controller gave us a session id
	EventActive   Event = "active"   // the session is active; its file is sealed
	EventUnwanted Event = "unwanted" // the run no longer needs a session: ended, cancelled, vanished, requeued, held
	EventFail     Event = "fail"     // the run cannot be served
	EventClosed   Event = "closed"   // the session is cancelled or gone at the controller
	EventBound    Event = "bound"    // ready, and its file sealed again for the job its array element became
	EventHanded   Event = "handed"   // the ended run's session passed to a like run, not cancelled (handoff.go)
	EventTaken    Event = "taken"    // the session of a like run that ended passed to this one, sealed for it
)

// A Transition is one step of a reservation's history.
type Transition struct {
	From, To State
	Event    Event
	Reason   string
	At       time.Time
}

// next is the transition table: from a state, the state each event leads to. An event missing here is not
// allowed in that state.
var next = map[State]map[Event]State{
	StatePending: {
		EventRequest:  StateRequesting,
		EventWait:     StatePending,
		EventTaken:    StateReady,
		EventUnwanted: StateReleased,
		EventFail:     StateFailed,
	},
	StateRequesting: {
		EventQueued:   StateWaiting,
		EventUnwanted: StateReleasing,
		EventFail:     StateReleasing,
	},
	StateWaiting: {
		EventQueued:   StateWaiting,
		EventActive:   StateReady,
		EventTaken:    StateReady, // a like run's session instead of its own queued one (handoff.go)
		EventUnwanted: StateReleasing,
		EventFail:     StateReleasing,
		EventClosed:   StateReleasing,
	},
	StateReady: {
		EventBound:    StateReady,
		EventUnwanted: StateReleasing,
		EventFail:     StateReleasing,
		EventClosed:   StateReleasing,
	},
	StateReleasing: {
		EventClosed: StateReleased, // or StateFailed when FailReason is set: see Apply
		EventHanded: StateReleased,
		// A failure learnt while releasing (the run could not be served after all) keeps releasing.
		EventFail:     StateReleasing,
		EventUnwanted: StateReleasing,
	},
}

// Apply moves r along one edge of the state machine and returns the step taken. It changes only the status's
// State, Reason, FailReason and Requested; the caller stores the result. An event that is not allowed in r's
// state is an error and changes nothing. Only the Reconciler calls it.
func Apply(r *Reservation, ev Event, reason string, now time.Time) (Transition, error) {
	s := &r.Status
	to, ok := next[s.State][ev]
	if !ok {
		return Transition{}, fmt.Errorf("reservation %s of %s: event %q is not allowed in state %s", r.ID, r.Run, ev, s.State)
	}
	switch ev {
	case EventHanded:
		// A session a failure brought here is one the run could not use: it is never passed on.
		if s.FailReason != "" {
			return Transition{}, fmt.Errorf("reservation %s of %s: a failed run's session is not handed on (%s)", r.ID, r.Run, s.FailReason)
		}
	case EventRequest:
		s.Requested = true
	case EventFail:
		if s.FailReason == "" {
			s.FailReason = reason
		}
		// Nothing was ever asked of the controller: no session can exist, so the run fails at once.
		if s.State == StatePending {
			to = StateFailed
		}
	case EventClosed:
		if s.State == StateReleasing && s.FailReason != "" {
			to = StateFailed
			if reason == "" {
				reason = s.FailReason
			}
		}
		// A session closed by the controller before we let it go means the run lost its GPUs.
		if s.State == StateWaiting || s.State == StateReady {
			if s.FailReason == "" {
				s.FailReason = reason
			}
		}
	}
	t := Transition{From: s.State, To: to, Event: ev, Reason: reason, At: now}
	s.State = to
	s.Reason = reason
	return t, nil
}
