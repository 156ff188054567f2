package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
)

// Juice is the Juice Controller as the Reconciler uses it: the port this package owns, so that the domain says
// what it needs of the controller in its own words, and knows no wire type. controller/juiceport adapts a
// juiceapi.Client to it; reconcile/juicefake is an in-memory one for tests.
type Juice interface {
	// RequestSession asks for a session serving req under key, the reservation's id, sent as its idempotency key.
	// It is sent once: the Reconciler, not the port, decides to ask again, after looking for the session by its
	// key (a controller without idempotency books a second session for a repeat). ErrNeverFits: no agent of the
	// pool can ever hold req, or the pool cannot be named; ErrRefused: req breaks the client's own bounds. Either
	// way no session exists under key.
	RequestSession(ctx context.Context, key uuid.UUID, req request.Request) (sessionID string, err error)
	// GetSession reads a session, judged against req (Session.GPUs, Session.Unfit). ErrNoSession: the controller
	// does not know it.
	GetSession(ctx context.Context, id string, req request.Request) (Session, error)
	// CancelSession lets a session go. ErrNoSession: the controller does not know it; ErrNotYet: it cannot be
	// cancelled before its agent holds it.
	CancelSession(ctx context.Context, id string) error
	PoolWalker
}

// PoolWalker walks a pool: what Liveness needs of the controller.
type PoolWalker interface {
	// WalkPool returns what a walk of pool sees, taken at now: its agents and the sessions they hold, so that
	// sessions are found by key without a session listing. ErrNeverFits: the pool cannot be named.
	WalkPool(ctx context.Context, pool string, now time.Time) (PoolView, error)
}

// What the port's errors are, for errors.Is. An adapter keeps the client's own error in the chain, and its text.
var (
	// ErrNoSession: the controller does not know the session.
	ErrNoSession = errors.New("the Juice Controller does not know the session")
	// ErrNeverFits: the request can never be served by its pool (or the pool cannot be named).
	ErrNeverFits = errors.New("the Juice Controller can never fit the request")
	// ErrRefused: the request breaks the Juice client's own bounds; it was never sent.
	ErrRefused = errors.New("the Juice client refuses the request")
	// ErrNotYet: the session cannot be cancelled before its agent holds it; cancel again later.
	ErrNotYet = errors.New("the session cannot be cancelled yet")
)

// Phase is where a session stands at the controller, as far as the Reconciler tells phases apart.
type Phase int

const (
	SessionQueued   Phase = iota // asked, on no agent yet (or a state the adapter does not know)
	SessionAssigned              // placed on an agent, which is starting it
	SessionActive                // usable by a job
	SessionEnded                 // holds, or will soon hold, no GPU any more
)

// Session is a session as the Reconciler sees it.
type Session struct {
	ID string
	// Key is the idempotency key the session carries ("" when none): a reservation's id when it is ours.
	Key string
	// State is the controller's own word for it (for people); Phase is what the Reconciler decides on.
	State   string
	Phase   Phase
	Address string // the agent's host:port, once assigned
	// GPUs are the GPU indexes that serve the request the session was read against: lowest first, at most as
	// many as asked (the legacy controller gives every GPU of the agent; the job gets exactly what it asked).
	GPUs []int
	// Unfit says why an active session does not serve that request ("" when it does): no address, fewer GPUs,
	// less VRAM.
	Unfit string
}

// Active reports whether the session is usable by a job.
func (s Session) Active() bool { return s.Phase == SessionActive }

// Ended reports whether the session holds, or will soon hold, no GPU any more.
func (s Session) Ended() bool { return s.Phase == SessionEnded }

// Agent is a GPU host of a pool as a walk saw it.
type Agent struct {
	ID, Address string
	// State is the controller's word for it (for people); Active is whether it is an active agent of the pool.
	State  string
	Active bool
}

// Held is a session and the agent holding it.
type Held struct {
	Session Session
	Agent   Agent
}

// PoolView is what a walk of one pool saw.
type PoolView interface {
	// Taken is when the walk started: a session that became ready later may be missing from it.
	Taken() time.Time
	// Whole reports whether the walk saw every agent of the pool, so that an agent missing from it is not one of
	// the pool's.
	Whole() bool
	// ByKey returns the sessions carrying key that have not ended, each with the agent holding it.
	ByKey(key string) []Held
	// Find returns the session with id and the agent holding it; false when no agent seen holds it.
	Find(id string) (Held, bool)
	// AgentAt returns the agent seen at address; false when none is.
	AgentAt(address string) (Agent, bool)
	// Keyed returns every session seen that has not ended and carries a key, with the agent holding it: what the
	// sweep judges (controller/sweep).
	Keyed() []Held
}
