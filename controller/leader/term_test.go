package leader

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/notify"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

var (
	_ Store      = (*store.Store)(nil)
	_ Hub        = (*notify.Hub)(nil)
	_ Reconciler = (*reconcile.Reconciler)(nil)
	_ Liveness   = (*reconcile.Liveness)(nil)
)

// recorder records, in memory, every call the term makes of its store and actors.
type recorder struct {
	mu    sync.Mutex
	calls []string
	open  []uuid.UUID // what OpenIDs lists
	moves map[reconcile.State]bool
}

func (l *recorder) add(s string) { l.mu.Lock(); l.calls = append(l.calls, s); l.mu.Unlock() }

func (l *recorder) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.calls {
		if c == s {
			return true
		}
	}
	return false
}

func (l *recorder) OpenIDs(_ context.Context, all bool) ([]uuid.UUID, error) {
	if all {
		l.add("relist")
	}
	l.mu.Lock() // the test sets open while the term re-lists
	defer l.mu.Unlock()
	return l.open, nil
}
func (l *recorder) Ready(context.Context) ([]reconcile.ReadyRun, error) { return nil, nil }
func (l *recorder) Prune(context.Context, time.Time) (int64, error)     { return 0, nil }
func (l *recorder) ObserveReconcile(time.Time, error)                   {}
func (l *recorder) ObservePrune(int64, error)                           {}
func (l *recorder) LeadQueues(map[string]func() int) func()             { return func() {} }
func (l *recorder) Poll(context.Context) error                          { return nil }
func (l *recorder) Kick()                                               { l.add("kick") }
func (l *recorder) Suspects(context.Context, []reconcile.ReadyRun) ([]uuid.UUID, error) {
	return nil, nil
}
func (l *recorder) Act(_ context.Context, id uuid.UUID) error {
	l.add("act " + id.String())
	return nil
}
func (l *recorder) Moves(_ uuid.UUID, s reconcile.State) bool { return l.moves[s] }
func (l *recorder) Reconcile(_ context.Context, id uuid.UUID) (reconcile.Result, error) {
	l.add("reconcile " + id.String())
	return reconcile.Result{}, nil
}

// hub hands the term's callbacks to the test.
type hub struct {
	mu        sync.Mutex
	change    func(notify.Change)
	connected func()
}

func (h *hub) OnChange(f func(notify.Change)) func() {
	h.mu.Lock()
	h.change = f
	h.mu.Unlock()
	return func() {}
}

func (h *hub) OnConnect(f func()) func() {
	h.mu.Lock()
	h.connected = f
	h.mu.Unlock()
	return func() {}
}

func (h *hub) ready() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.change != nil && h.connected != nil
}

// Each actor hears of the changes it acts on: the reconciler of a new reservation (and the poller is kicked) and
// of a changed spec, the job actor of what Slurm says and of the reconciler's moves it may act on; a
// (re)subscribe re-lists every open reservation to both.
func TestTermRoutesChangesToTheirActors(t *testing.T) {
	l := &recorder{moves: map[reconcile.State]bool{reconcile.StateReady: true}}
	h := &hub{}
	term := &Term{Store: l, Hub: h, Log: logr.Discard(), Metrics: l, Workers: 1,
		Actors: func(func(uuid.UUID)) Actors {
			return Actors{Poller: l, Reconciler: l, Liveness: l, Jobs: l}
		},
		Tuning: func() (time.Duration, time.Duration) { return time.Hour, 0 }, Resync: time.Hour, FullResync: time.Hour,
		ReadyCheck: time.Hour, Sweep: func(context.Context) {}, SweepFiles: func(context.Context) {}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); term.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, h.ready, 5*time.Second, time.Millisecond)

	created, spec, observed, ready, waiting := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	h.change(notify.Change{ID: created, Kind: store.KindCreated})
	h.change(notify.Change{ID: spec, Kind: store.KindSpec})
	h.change(notify.Change{ID: observed, Kind: store.KindObserved})
	h.change(notify.Change{ID: ready, Kind: store.KindStatus, State: reconcile.StateReady})
	h.change(notify.Change{ID: waiting, Kind: store.KindStatus, State: reconcile.StateWaiting})
	for _, want := range []string{"kick", "reconcile " + created.String(), "reconcile " + spec.String(),
		"act " + observed.String(), "act " + ready.String()} {
		require.Eventually(t, func() bool { return l.has(want) }, 5*time.Second, time.Millisecond, want)
	}
	time.Sleep(50 * time.Millisecond)
	for _, never := range []string{"act " + created.String(), "act " + spec.String(), "reconcile " + observed.String(),
		"reconcile " + ready.String(), "act " + waiting.String(), "reconcile " + waiting.String()} {
		require.False(t, l.has(never), never)
	}

	missed := uuid.New()
	l.mu.Lock()
	l.open = []uuid.UUID{missed}
	l.mu.Unlock()
	h.connected()
	for _, want := range []string{"reconcile " + missed.String(), "act " + missed.String()} {
		require.Eventually(t, func() bool { return l.has(want) }, 5*time.Second, time.Millisecond, want)
	}
}

// The license sync runs for the term only: it starts with the term and its context ends when the term does, so a
// replica that lost the lease writes no license.
func TestTermRunsTheLicenseSyncForItsDuration(t *testing.T) {
	l := &recorder{}
	started, stopped := make(chan struct{}), make(chan struct{})
	term := &Term{Store: l, Hub: &hub{}, Log: logr.Discard(), Metrics: l, Workers: 1,
		Actors: func(func(uuid.UUID)) Actors {
			return Actors{Poller: l, Reconciler: l, Liveness: l, Jobs: l}
		},
		Tuning: func() (time.Duration, time.Duration) { return time.Hour, 0 }, Resync: time.Hour, FullResync: time.Hour,
		ReadyCheck: time.Hour, Sweep: func(context.Context) {}, SweepFiles: func(context.Context) {},
		Licenses: func(ctx context.Context) {
			close(started)
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond)
			close(stopped)
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); term.Run(ctx) }()
	<-started
	select {
	case <-stopped:
		t.Fatal("the license sync stopped while the term runs")
	case <-time.After(20 * time.Millisecond):
	}
	cancel()
	<-done
	select {
	case <-stopped:
	default:
		t.Fatal("the term ended before its license sync")
	}
}

// The look for stranded runs runs at once and then every StrandedEvery, apart from the sweep (off here), and ends
// with the term.
func TestTermLooksForStrandedRunsOnItsOwnPace(t *testing.T) {
	l := &recorder{}
	looks := make(chan struct{}, 10)
	term := &Term{Store: l, Hub: &hub{}, Log: logr.Discard(), Metrics: l, Workers: 1,
		Actors: func(func(uuid.UUID)) Actors {
			return Actors{Poller: l, Reconciler: l, Liveness: l, Jobs: l}
		},
		Tuning: func() (time.Duration, time.Duration) { return time.Hour, 0 }, Resync: time.Hour, FullResync: time.Hour,
		ReadyCheck: time.Hour, Sweep: func(context.Context) {}, SweepFiles: func(context.Context) {},
		LookStranded:  func(context.Context) { looks <- struct{}{} },
		StrandedEvery: 10 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); term.Run(ctx) }()
	for i := 0; i < 3; i++ {
		select {
		case <-looks:
		case <-time.After(10 * time.Second):
			t.Fatalf("look %d never came", i+1)
		}
	}
	cancel()
	<-done
	for len(looks) > 0 {
		<-looks
	}
	time.Sleep(30 * time.Millisecond)
	require.Empty(t, looks, "a look after the term ended")
}
