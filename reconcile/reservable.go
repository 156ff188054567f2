package reconcile

// Standing is where a run stands before a new reservation: whether it may get one.
type Standing int

const (
	// Free: no reservation of the run blocks a new one. A first run; a run whose reservations were all let go
	// while its job was held; a requeued run (a new run: its predecessor's reservations are not its own); a run
	// whose reservations Prune deleted (Store.Prune: a final reservation is kept for the retention, then
	// deleted, and with it the block). A free run is reserved when it is wanted (started, or picked by the
	// look-ahead).
	Free Standing = iota
	// Live: one of the run's reservations is live (not final). The run keeps it, and its place in the
	// look-ahead, and gets no other.
	Live
	// Over: a reservation of the run failed, or ended the run (Spec.RunOver). The run is never reserved again,
	// and takes no place in the look-ahead.
	Over
)

func (s Standing) String() string {
	switch s {
	case Free:
		return "free"
	case Live:
		return "live"
	case Over:
		return "over"
	}
	return "unknown"
}

// Reservable is the one answer to "may this run be reserved, first or again?", from every reservation the store
// keeps of the run (records: the run's own, open and final). A reservation blocks a new one while it is live, and
// for ever once it failed or ended the run; a reservation released while its run stayed open (its job was held)
// does not. The partial unique indexes juice_reservations_live_run and juice_reservations_live_element (the
// predicate blocksNew in reconcile/store/sql.go) are only the database's guard of this rule, for two writers
// that race: TestBlocksNewIsReservable checks that they agree.
func Reservable(records []Tracked) Standing {
	st := Free
	for _, r := range records {
		switch {
		case !r.State.Final():
			return Live
		case r.State == StateFailed || r.RunOver:
			st = Over
		}
	}
	return st
}

// A Release is why an open run no longer wants its session, as its job is seen.
type Release int

const (
	ReleaseEnded    Release = iota // the job ended, or is completing
	ReleaseRequeued                // the job was requeued: a new run replaces this one
	ReleaseGone                    // slurmctld no longer knows the job, or the array element left its remainder unstarted
	ReleaseHeld                    // the job, or its array, is held
)

// EndsRun reports whether the release ends the run: what it records as Spec.RunOver, which Reservable reads. Every
// release does but a hold, which gives the GPUs back until the job is let go, and the run is reserved again then.
func (r Release) EndsRun() bool { return r != ReleaseHeld }
