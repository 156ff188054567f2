package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/controller/hookserver"
	"github.com/juice-slurm/juice-slurm/controller/notify"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// P6Result is the ready → prolog wake-up latency, with NOTIFY and with the fallback re-read only.
type P6Result struct {
	Notify   Stats
	Fallback Stats
	Recheck  time.Duration
	// NotifyReads / FallbackReads: row reads per trial by the waiting call after it was armed (the cost of the
	// wait: a busy poller would show hundreds).
	NotifyReads, FallbackReads float64
}

// armedStore is the hook API's store with a signal: the hook's wait is armed once it has read the row after
// subscribing (Get, with NOTIFY) or, without a hub, after its first read (LiveRunSealed); the benchmark commits only
// then, so each trial measures the wake-up and not a race with the subscription.
type armedStore struct {
	*store.Store
	mu    sync.Mutex
	armed map[uuid.UUID]chan struct{}
	reads map[uuid.UUID]int
	onGet bool // true: armed by Get (hub); false: by ForRun (no hub)
}

func (s *armedStore) signal(id uuid.UUID) {
	s.mu.Lock()
	ch := s.armed[id]
	delete(s.armed, id)
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (s *armedStore) Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error) {
	r, err := s.Store.Get(ctx, id)
	s.mu.Lock()
	s.reads[id]++
	s.mu.Unlock()
	if s.onGet {
		s.signal(id)
	}
	return r, err
}

func (s *armedStore) LiveRunSealed(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, []byte, error) {
	r, sealed, err := s.Store.LiveRunSealed(ctx, run)
	if !s.onGet && err == nil {
		s.signal(r.ID)
	}
	return r, sealed, err
}

// P6 measures the time from the commit that makes a reservation ready to the HTTP reply of a prolog call that
// waits for it, through the real hook API and its hub (PostgreSQL LISTEN/NOTIFY). trials run one after the
// other with NOTIFY; fallbackTrials run with no hub (only the re-read every second), concurrently in groups, each
// committing at a random moment of the recheck period, since each lasts up to a second.
func P6(ctx context.Context, trials, fallbackTrials int) (P6Result, error) {
	res := P6Result{Recheck: time.Second}
	w, err := NewWorld(ctx, WorldConfig{})
	if err != nil {
		return res, err
	}
	defer w.Close()
	// The committing writer has a connection of its own, as the leader (another replica, perhaps) has.
	writer, err := pgx.Connect(ctx, w.DB.Runtime)
	if err != nil {
		return res, err
	}
	defer writer.Close(context.Background())
	var nextJob uint32 = 1
	for _, mode := range []struct {
		hub    bool
		n, par int
		out    *Stats
		reads  *float64
	}{{true, trials, 1, &res.Notify, &res.NotifyReads}, {false, fallbackTrials, 25, &res.Fallback, &res.FallbackReads}} {
		armed := &armedStore{Store: w.Store, armed: map[uuid.UUID]chan struct{}{}, reads: map[uuid.UUID]int{}, onGet: mode.hub}
		hctx, stopHub := context.WithCancel(ctx)
		api := &hookserver.Server{Store: armed, Secret: w.Secret, Log: logr.Discard(), Recheck: res.Recheck}
		var hubDone chan struct{}
		if mode.hub {
			// As controller.Run wires it: one LISTEN connection per replica.
			api.Hub = &notify.Hub{Pool: w.Pool, Cluster: Cluster, Log: logr.Discard()}
			hubDone = make(chan struct{})
			go func() { defer close(hubDone); api.Hub.Run(hctx) }()
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stopHub()
			return res, err
		}
		srv := &http.Server{Handler: api.Handler()}
		go srv.Serve(ln)
		url := "http://" + ln.Addr().String() + "/v1/prolog"
		if mode.hub {
			time.Sleep(100 * time.Millisecond) // the hub's LISTEN is in place
		}
		var ds []time.Duration
		var mu sync.Mutex
		var firstErr error
		for done := 0; done < mode.n && firstErr == nil; {
			batch := min(mode.par, mode.n-done)
			var wg sync.WaitGroup
			for b := 0; b < batch; b++ {
				job := nextJob
				nextJob++
				r, _, err := w.Store.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: Cluster, JobID: job},
					Request: mustRequest(), UserName: "alice", JobState: "CONFIGURING", Reason: "benchmark"})
				if err != nil {
					firstErr = err
					break
				}
				// A real file sealed for the run: the prolog hands out only a file whose header names its run.
				sealed, err := session.Seal(w.Key, session.Binding{Cluster: Cluster, JobID: job, Reservation: r.ID},
					[]session.EnvVar{{Name: "JUICE_SESSION_ID", Value: "bench"}})
				if err != nil {
					firstErr = err
					break
				}
				ready := make(chan struct{})
				armed.mu.Lock()
				armed.armed[r.ID] = ready
				armed.mu.Unlock()
				wg.Add(1)
				go func() {
					defer wg.Done()
					d, err := p6Trial(ctx, url, world.Secret, job, r.ID, sealed, ready, mode.hub, writer, &mu)
					mu.Lock()
					defer mu.Unlock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					ds = append(ds, d)
				}()
			}
			wg.Wait()
			done += batch
		}
		srv.Close()
		stopHub()
		if hubDone != nil {
			<-hubDone
		}
		if firstErr != nil {
			return res, firstErr
		}
		*mode.out = Summarise(ds)
		total := 0
		for _, n := range armed.reads {
			total += n
		}
		*mode.reads = float64(total) / float64(len(ds))
	}
	return res, nil
}

// p6Trial starts a waiting prolog call for job, commits the reservation's move to ready once the call is
// armed, and returns the time from just before COMMIT to the reply's last byte at the client.
func p6Trial(ctx context.Context, url string, secret []byte, job uint32, id uuid.UUID, sealed []byte, armed chan struct{}, hub bool,
	writer *pgx.Conn, writerMu *sync.Mutex) (time.Duration, error) {
	type result struct {
		at  time.Time
		err error
	}
	got := make(chan result, 1)
	go func() {
		body, _ := json.Marshal(hookapi.PrologRequest{Cluster: Cluster, JobID: job, WaitSeconds: 10})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+string(secret))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		at := time.Now()
		var rep hookapi.PrologReply
		if err == nil {
			err = json.Unmarshal(raw, &rep)
		}
		if err == nil && rep.Outcome != hookapi.OutcomeReady {
			err = fmt.Errorf("job %d: prolog answered %q, not ready", job, raw)
		}
		got <- result{at, err}
	}()
	select {
	case <-armed:
	case r := <-got:
		return 0, fmt.Errorf("job %d: the prolog returned before it waited: %v", job, r.err)
	case <-time.After(5 * time.Second):
		return 0, fmt.Errorf("job %d: the prolog call never started waiting", job)
	}
	if hub {
		// A moment for the handler to reach its select: what is measured is the wake-up, not the handler's last
		// few instructions before it waits.
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	} else {
		// Anywhere in the recheck period, as a real commit would fall.
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
	}
	// The same statements as store.SaveStatus (update, event row, pg_notify) in one transaction; the clock starts
	// just before COMMIT, which is when PostgreSQL delivers the notification.
	writerMu.Lock()
	t0, err := commitReady(ctx, writer, id, sealed)
	writerMu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case r := <-got:
		if r.err != nil {
			return 0, r.err
		}
		return r.at.Sub(t0), nil
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("job %d: no reply within 10s of the commit", job)
	}
}

func commitReady(ctx context.Context, c *pgx.Conn, id uuid.UUID, sealed []byte) (time.Time, error) {
	tx, err := c.Begin(ctx)
	if err != nil {
		return time.Time{}, err
	}
	defer tx.Rollback(context.Background())
	// sealed_job_id: the file is sealed for the run's job (session files v2), else the prolog keeps waiting.
	if _, err := tx.Exec(ctx, `UPDATE juice_reservations SET state = 'ready', reason = 'benchmark: ready',
		sealed = $2, sealed_job_id = job_id, session_id = 'bench', ready_at = now(), updated_at = now(),
		version = version + 1 WHERE id = $1`,
		id, sealed); err != nil {
		return time.Time{}, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO juice_events (reservation_id, from_state, to_state, event, reason)
		VALUES ($1, 'pending', 'ready', 'active', 'benchmark')`, id); err != nil {
		return time.Time{}, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, store.NotifyChannel, Cluster+" "+id.String()+" status ready"); err != nil {
		return time.Time{}, err
	}
	t0 := time.Now()
	return t0, tx.Commit(ctx)
}

func mustRequest() request.Request {
	r, err := request.Parse(Request)
	if err != nil {
		panic(err)
	}
	return r
}
