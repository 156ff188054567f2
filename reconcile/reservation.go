// Package reconcile is juice-slurm's domain: a reservation per run of a Juice job, its state machine, the
// look-ahead policy that says which pending jobs are reserved now, and the Reconciler, the one actor that moves
// a reservation along the state machine by acting on the Juice Controller.
//
// A reservation has two halves, as a Kubernetes object has a spec and a status:
//
//   - Spec is what the observers record (the poller watching slurmrestd, the hooks, the admin CLI, any
//     replica): whether the run still wants a session and why, whether the run is over, and what Slurm last said
//     of its job. Observers write only the spec, and their writes never conflict with the reconciler's.
//   - Status is the reconciler's alone: the state, the session, the sealed session file.
//
// The Reconciler acts on the Juice Controller through Juice, a port this package defines in its own words
// (juice.go); controller/juiceport adapts the Juice client to it.
//
// The sub-packages hold the request grammar (request), the session file and task environment (session) and the
// PostgreSQL store (store); for tests with no service, an in-memory store (memstore) and an in-memory Juice
// Controller behind the port (juicefake).
package reconcile

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
)

// A RunID names one run of a Slurm job: a requeued job is a new run, with the restart count one higher, and gets
// a reservation of its own.
//
// A job array's element also names its array and task (ArrayJobID not 0). slurmctld gives an element a job id of
// its own only when it starts it, so an element reserved ahead is named by its array and task alone (JobID 0,
// Unbound) until it is seen as its own job and its reservation is bound to that job id (store.Store.Bind).
type RunID struct {
	Cluster string
	JobID   uint32
	Run     int
	// ArrayJobID and ArrayTaskID place an array's element; ArrayJobID is 0 for a job that is not in an array.
	ArrayJobID  uint32
	ArrayTaskID uint32
}

// Element reports whether the run is a job array's element.
func (r RunID) Element() bool { return r.ArrayJobID != 0 }

// Unbound reports whether the run is an array element reserved ahead that has no job id yet.
func (r RunID) Unbound() bool { return r.JobID == 0 && r.Element() }

// Bound returns the run as the job jobID that its element became.
func (r RunID) Bound(jobID uint32) RunID { r.JobID = jobID; return r }

func (r RunID) String() string {
	switch {
	case r.Unbound():
		return fmt.Sprintf("%s/%d_%d.%d", r.Cluster, r.ArrayJobID, r.ArrayTaskID, r.Run)
	case r.Element():
		return fmt.Sprintf("%s/%d.%d (%d_%d)", r.Cluster, r.JobID, r.Run, r.ArrayJobID, r.ArrayTaskID)
	}
	return fmt.Sprintf("%s/%d.%d", r.Cluster, r.JobID, r.Run)
}

// Binding is what the run's session file is bound to.
func (r RunID) Binding() session.Binding {
	return session.Binding{Cluster: r.Cluster, JobID: r.JobID, Run: r.Run}
}

// Tracked is what the poller compares with Slurm of a reservation (the open ones, and the final ones of the jobs it
// sees): a few fields instead of the whole row, since it reads every open reservation at each comparison (100,000
// of them on a large site).
type Tracked struct {
	ID    uuid.UUID
	Run   RunID
	State State
	// RunOver is the spec's: the reservation ended its run (see Reservable).
	RunOver bool
	// JobState and JobReason are the spec's: what Slurm last said of the job.
	JobState, JobReason string
	// HasStart and HasEnd: Slurm's start and end of the run's job are recorded (Store.ObserveTimes).
	HasStart, HasEnd bool
}

// Reservation is one run's reservation, as stored.
type Reservation struct {
	// ID is also the idempotency key sent with every request to the Juice Controller for this reservation.
	ID      uuid.UUID
	Run     RunID
	Request request.Request
	// UserName, Account (the Slurm account the job is charged to) and Partition are what the site policy and the
	// report need of the job, and what people reading status see. Empty when Slurm did not say.
	UserName  string
	Account   string
	Partition string
	CreatedAt time.Time

	Spec   Spec
	Status Status
}

// Spec is what the observers see and want. The reconciler reads it and never writes it.
type Spec struct {
	// Wanted: does the run still need a session? It starts true and, once false, stays false: a run that is
	// wanted again (a held job let go) gets a new reservation.
	Wanted bool
	// WantReason says why the run is no longer wanted, for people and for the transition it causes.
	WantReason string
	// RunOver is set when the run itself ended (its job ended, vanished or was requeued, or an administrator
	// released it): the run never gets another reservation. A reservation let go because its job is held leaves
	// the run open.
	RunOver bool
	// JobState and JobReason are what Slurm last said of the job (state, and the reason it is pending).
	JobState  string
	JobReason string
}

// Status is the reconciler's: where the reservation stands.
type Status struct {
	State State
	// Reason says, for people, why the reservation is in its state.
	Reason string
	// FailReason is set once the run cannot be served; the reservation then ends in StateFailed.
	FailReason string
	// Requested is set once a request with this reservation's key may have reached the controller, so that a
	// release knows it must find and cancel a session even when it never learnt the session's id.
	Requested bool
	// MaybeOrphans is set when the session was learnt on a later attempt than the run's first request: an earlier
	// answer may have been lost, and a controller without idempotency may have booked another session under the
	// key. Only then are the pool's sessions searched for orphans when the run becomes ready or is released; a
	// session got on the first request is the only one its key can name.
	MaybeOrphans bool

	SessionID    string
	AgentAddress string
	ReadyAt      time.Time
	UpdatedAt    time.Time
	// Sealed is the session file, sealed for this run under the cluster key. The store reads it only for the
	// prolog (Store.Sealed), and writes it only when it is set: a status write without it keeps the stored one.
	// It is dropped once the reservation is final.
	Sealed []byte
	// SealedJobID is the job id the sealed file is bound to (its header's): an array element's reservation sealed
	// before it was bound is sealed for job 0, and sealed again for its job once bound. The prolog is handed the
	// file only when it is its run's job's (SealedFor).
	SealedJobID uint32
	// Version counts status writes; a write based on an older version is refused (ErrConflict), so two
	// reconcile passes never interleave. Observers' writes do not move it.
	Version int64
}

// SealedFor reports whether the reservation is ready with a session file sealed for its own job: what the
// prolog may be handed.
func (r *Reservation) SealedFor() bool {
	return r.Status.State == StateReady && r.Run.JobID != 0 && r.Status.SealedJobID == r.Run.JobID
}

// Failed reports whether the run is known not to be served: the prolog gives up on it at once.
func (r *Reservation) Failed() bool {
	return r.Status.State == StateFailed || r.Status.FailReason != ""
}

// A NewReservation is what is known of a run when an observer first wants it reserved.
type NewReservation struct {
	Run       RunID
	Request   request.Request
	UserName  string
	Account   string
	Partition string
	// JobState and JobReason are what Slurm says of the job as it is first seen: stored in the spec at once, so
	// that the next poll, which sees the same, has nothing to write.
	JobState, JobReason string
	// Reason says who saw the run first: the poller, or a prolog that came before it.
	Reason string
}

var (
	// ErrNotFound: no such reservation (in this cluster).
	ErrNotFound = errors.New("reservation not found")
	// ErrConflict: the status changed since it was read; read it again and decide again.
	ErrConflict = errors.New("reservation changed concurrently")
)
