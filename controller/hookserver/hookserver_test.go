package hookserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

var _ Store = (*store.Store)(nil)

// memStore serves one pending reservation, whose prolog waits, from memory; it counts the reads of it.
type memStore struct {
	Store // the rest is not called
	r     reconcile.Reservation
	reads atomic.Int32

	// sealed is the file LiveRunSealed reads with r; later, when set, is what Get reads (the row as a status write
	// left it during the wait), whose file Sealed reads (counted in sealedReads).
	sealed, laterSealed []byte
	later               *reconcile.Reservation
	sealedReads         atomic.Int32

	poolWaits bool         // what PoolWaits answers
	gets      atomic.Int32 // Get's reads: a wait's re-reads

	mu       sync.Mutex
	observed []string // ObserveJob's job states
}

func (*memStore) Cluster() string { return "c1" }

func (m *memStore) LiveRunSealed(_ context.Context, run reconcile.RunID) (reconcile.Reservation, []byte, error) {
	if run != m.r.Run {
		return reconcile.Reservation{}, nil, reconcile.ErrNotFound
	}
	m.reads.Add(1)
	return m.r, m.sealed, nil
}

func (m *memStore) Get(context.Context, uuid.UUID) (reconcile.Reservation, error) {
	m.gets.Add(1)
	if m.later != nil {
		return *m.later, nil
	}
	return m.r, nil
}

func (m *memStore) UnwantRun(context.Context, reconcile.RunID, string, bool) (bool, error) {
	return true, nil
}

func (m *memStore) ForRun(context.Context, reconcile.RunID) (reconcile.Reservation, error) {
	return m.r, nil
}

func (m *memStore) PoolWaits(context.Context, string, uuid.UUID) (bool, error) {
	return m.poolWaits, nil
}

func (m *memStore) Sealed(context.Context, uuid.UUID) ([]byte, error) {
	m.sealedReads.Add(1)
	return m.laterSealed, nil
}

func (m *memStore) ObserveJob(_ context.Context, _ uuid.UUID, state, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observed = append(m.observed, state)
	return nil
}

// prologReply calls the prolog of job 1 run 0 at url, waiting at most wait seconds, and decodes the reply.
func prologReply(t *testing.T, url string, wait float64) hookapi.PrologReply {
	t.Helper()
	body := fmt.Sprintf(`{"cluster":"c1","job_id":1,"run":0,"wait_seconds":%g}`, wait)
	req, err := http.NewRequest(http.MethodPost, url+"/v1/prolog", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var rep hookapi.PrologReply
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
	return rep
}

// A prolog is Slurm starting the run: a reservation made ahead, whose spec still says PENDING (the poller has not
// seen the start), is recorded CONFIGURING before the wait, so that no started job's reservation is ever let go for
// a pending one's (reconcile.MustYield); a run recorded started is not written again.
func TestPrologRecordsThatSlurmStartedTheRun(t *testing.T) {
	for _, c := range []struct {
		state string
		want  []string
	}{{"PENDING", []string{"CONFIGURING"}}, {"", []string{"CONFIGURING"}}, {"RUNNING", nil}, {"CONFIGURING", nil}} {
		st := &memStore{r: reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 1},
			Spec: reconcile.Spec{Wanted: true, JobState: c.state}, Status: reconcile.Status{State: reconcile.StateWaiting}}}
		url := serve(t, &Server{Store: st, Unmunge: "/bin/false", Recheck: 10 * time.Millisecond})
		rep := prologReply(t, url, 0.05)
		require.Equal(t, hookapi.OutcomeWaiting, rep.Outcome, c.state)
		st.mu.Lock()
		require.Equal(t, c.want, st.observed, "spec job state %q", c.state)
		st.mu.Unlock()
	}
}

// A prolog whose session is ready reads the row and its file in one query; one whose session is sealed while it
// waits (a status write: a new version) reads the file that write stored, never the one of its first read.
func TestPrologOfAReadySessionIsOneRead(t *testing.T) {
	run := reconcile.RunID{Cluster: "c1", JobID: 1}
	ready := reconcile.Reservation{ID: uuid.New(), Run: run, Spec: reconcile.Spec{Wanted: true, JobState: "RUNNING"},
		Status: reconcile.Status{State: reconcile.StateReady, SealedJobID: 1, Version: 3}}
	seal := func(note string) []byte {
		b, err := session.Seal(bytes.Repeat([]byte{7}, 32), session.Binding{Cluster: "c1", JobID: 1, Reservation: ready.ID},
			[]session.EnvVar{{Name: "JUICE_NOTE", Value: note}})
		require.NoError(t, err)
		return b
	}
	st := &memStore{r: ready, sealed: seal("first")}
	rep := prologReply(t, serve(t, &Server{Store: st, Unmunge: "/bin/false"}), 1)
	require.Equal(t, hookapi.OutcomeReady, rep.Outcome)
	require.Equal(t, st.sealed, rep.Session)
	require.Equal(t, int32(1), st.reads.Load())
	require.Zero(t, st.sealedReads.Load(), "the file came with the row")

	waiting := ready
	waiting.Status.State, waiting.Status.SealedJobID = reconcile.StateWaiting, 0
	later := ready
	later.Status.Version = 5
	st = &memStore{r: waiting, sealed: seal("stale"), later: &later, laterSealed: seal("sealed during the wait")}
	rep = prologReply(t, serve(t, &Server{Store: st, Unmunge: "/bin/false", Recheck: 10 * time.Millisecond}), 1)
	require.Equal(t, hookapi.OutcomeReady, rep.Outcome)
	require.Equal(t, st.laterSealed, rep.Session)
	require.Equal(t, int32(1), st.sealedReads.Load())
}

// The epilog waits for the release (re-reading the row) only while another run waits for GPUs in the pool; with
// nobody waiting it answers at once, having read nothing more.
func TestEpilogWaitsOnlyForAnotherRun(t *testing.T) {
	releasing := reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 1},
		Request: request.Request{Pool: "p", GPUs: 1}, Status: reconcile.Status{State: reconcile.StateReleasing}}
	for _, waits := range []bool{false, true} {
		st := &memStore{r: releasing, poolWaits: waits}
		url := serve(t, &Server{Store: st, Unmunge: "/bin/false", Recheck: 10 * time.Millisecond})
		req, err := http.NewRequest(http.MethodPost, url+"/v1/epilog", strings.NewReader(`{"cluster":"c1","job_id":1,"run":0,"wait_seconds":0.1}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var rep hookapi.EpilogReply
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&rep))
		resp.Body.Close()
		require.Equal(t, hookapi.OutcomeWaiting, rep.Outcome)
		if waits {
			require.Positive(t, st.gets.Load(), "another run waits: the epilog waited for the release")
		} else {
			require.Zero(t, st.gets.Load(), "nobody waits: the epilog answered at once")
		}
	}
}

// A reservation let go without ending its run (it yielded its pool to another started job just as this one
// started) keeps the prolog waiting: the run is reserved again once it is released. One let go for good fails it.
func TestPrologWaitsOnAReservationLetGoWithoutEndingItsRun(t *testing.T) {
	yielded := reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 1},
		Spec:   reconcile.Spec{WantReason: "yields pool p to job 2", JobState: "CONFIGURING"},
		Status: reconcile.Status{State: reconcile.StateReleased}}
	rep := prologReply(t, serve(t, &Server{Store: &memStore{r: yielded}, Unmunge: "/bin/false", Recheck: 10 * time.Millisecond}), 0.05)
	require.Equal(t, hookapi.OutcomeWaiting, rep.Outcome)
	require.Contains(t, rep.Reason, "yields pool p to job 2")
	require.Contains(t, rep.Reason, "reserved again")

	over := yielded
	over.Spec.RunOver, over.Spec.WantReason = true, "job 1 was cancelled"
	rep = prologReply(t, serve(t, &Server{Store: &memStore{r: over}, Unmunge: "/bin/false", Recheck: 10 * time.Millisecond}), 0.05)
	require.Equal(t, hookapi.OutcomeFailed, rep.Outcome)
	require.Contains(t, rep.Reason, "let go before the job started")
}

const secret = "hook-secret-for-tests"

// serve runs a on a loopback listener, as the controller does (Listen, HTTPServer), and returns its address.
func serve(t *testing.T, a *Server) string {
	t.Helper()
	withSecret(t, a)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := a.HTTPServer()
	go srv.Serve(a.Listen(ln))
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// withSecret gives a the test secret, in a file of its own, and a quiet log.
func withSecret(t *testing.T, a *Server) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "hook.secret")
	require.NoError(t, os.WriteFile(f, []byte(secret+"\n"), 0o600))
	a.Secret, a.Log = secretfile.New(f, nil), logr.Discard()
}

func call(ctx context.Context, t *testing.T, url, auth, body string) int {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", auth)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// One peer's calls in progress are capped, the hooks' waits and /v1/mine's calls together: over the cap a call
// gets 429 (which the hooks retry), and once the wait is over the peer is served again.
func TestWaitsPerPeerAreCappedAcrossCalls(t *testing.T) {
	st := &memStore{r: reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 1},
		Spec: reconcile.Spec{Wanted: true}, Status: reconcile.Status{State: reconcile.StatePending}}}
	url := serve(t, &Server{Store: st, MaxWaitsPerPeer: 1, Unmunge: "/bin/false", Recheck: 10 * time.Millisecond})
	prolog := `{"cluster":"c1","job_id":1,"run":0,"wait_seconds":20}`

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waited := make(chan int, 1)
	go func() { waited <- call(ctx, t, url+"/v1/prolog", "Bearer "+secret, prolog) }()
	require.Eventually(t, func() bool { return st.reads.Load() > 0 }, 10*time.Second, 5*time.Millisecond, "the first prolog waits")

	require.Equal(t, http.StatusTooManyRequests, call(context.Background(), t, url+"/v1/prolog", "Bearer "+secret, prolog))
	require.Equal(t, http.StatusTooManyRequests, call(context.Background(), t, url+"/v1/mine", "Munge cred", "{}"))
	require.Equal(t, http.StatusUnauthorized, call(context.Background(), t, url+"/v1/prolog", "Bearer wrong", prolog),
		"a call without the secret is refused before it takes a place")

	cancel()
	<-waited
	require.Eventually(t, func() bool {
		// /bin/false refuses every credential: served, the call is unauthorized rather than too many.
		return call(context.Background(), t, url+"/v1/mine", "Munge cred", "{}") == http.StatusUnauthorized
	}, 10*time.Second, 10*time.Millisecond, "the place is given back when the wait ends")
}
