package juiceapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/test/fakeclock"
)

// TestSessionStatePaths walks every state path of a session through the client, on a fake clock:
// each step acts, then the session must be in the wanted state.
func TestSessionStatePaths(t *testing.T) {
	type step struct {
		do   string // "advance", "cancel", "cancel-not-yet", "agent-missing", "release-blocker"
		want string
	}
	const (
		q, as, ac, cg, cl = juiceapi.StateQueued, juiceapi.StateAssigned, juiceapi.StateActive, juiceapi.StateCanceling, juiceapi.StateClosed
	)
	for _, c := range []struct {
		name    string
		blocked bool // the pool is full when the session is requested
		steps   []step
	}{
		{"queued, cancelled: closed at once", false, []step{{"cancel", cl}}},
		{"assigned, cancelled: not yet (its agent has not taken it), then once active", false, []step{{"advance", as}, {"cancel-not-yet", as},
			{"advance", ac}, {"cancel", cg}, {"advance", cl}}},
		{"active, cancelled: canceling then closed", false, []step{{"advance", as}, {"advance", ac}, {"cancel", cg}, {"advance", cl}}},
		{"active, agent missing: closed", false, []step{{"advance", as}, {"advance", ac}, {"agent-missing", cl}}},
		{"closed, cancelled again: still closed, no error", false, []step{{"cancel", cl}, {"cancel", cl}}},
		{"canceling, cancelled again: no error", false, []step{{"advance", as}, {"advance", ac}, {"cancel", cg}, {"cancel", cg}, {"advance", cl}}},
		{"queued behind a full pool, then runs", true, []step{{"advance", q}, {"advance", q}, {"release-blocker", q},
			{"advance", as}, {"advance", ac}, {"cancel", cg}, {"advance", cl}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			clock := fakeclock.New(time.Unix(1_700_000_000, 0))
			e := start(t, juicesim.Config{
				Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 1, 1, 80*G)}, Now: clock.Now,
				AssignDelay: time.Second, ActivateDelay: time.Second, CancelDelay: time.Second,
			}, nil)
			ctx := context.Background()
			var blocker string
			if c.blocked {
				blocker, _ = e.client.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
				clock.Add(2 * time.Second)
			}
			id, err := e.client.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1, VRAMPerGPU: 40 * G})
			if err != nil {
				t.Fatal(err)
			}
			if s, _ := e.client.GetSession(ctx, id); s.State != q {
				t.Fatalf("new session is %s", s.State)
			}
			for i, st := range c.steps {
				switch st.do {
				case "advance":
					clock.Add(time.Second)
				case "cancel":
					if err := e.client.CancelSession(ctx, id); err != nil {
						t.Fatalf("step %d: cancel: %v", i, err)
					}
				case "cancel-not-yet":
					if err := e.client.CancelSession(ctx, id); !errors.Is(err, juiceapi.ErrNotYet) {
						t.Fatalf("step %d: cancel of an assigned session: %v, want ErrNotYet", i, err)
					}
				case "agent-missing":
					if err := e.sim.SetAgentState("test-agent-1", juiceapi.AgentMissing); err != nil {
						t.Fatal(err)
					}
				case "release-blocker":
					if err := e.client.CancelSession(ctx, blocker); err != nil {
						t.Fatal(err)
					}
				}
				s, err := e.client.GetSession(ctx, id)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if s.State != st.want {
					t.Fatalf("step %d (%s): state %s, want %s", i, st.do, s.State, st.want)
				}
				hasGPUs := len(s.GPUs) == 1 && s.Address != ""
				if (st.want == as || st.want == ac || st.want == cg) && !hasGPUs {
					t.Fatalf("step %d: %s session without address/gpus: %+v", i, s.State, s)
				}
				if st.want == ac && s.GPUs[0].VRAMRequired != 40*G {
					t.Fatalf("granted %d bytes", s.GPUs[0].VRAMRequired)
				}
			}
			if err := e.sim.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestErrors checks every error kind through the client: errors.Is, the status and server text it
// carries, how often it was tried, and that the token never shows in it.
func TestErrors(t *testing.T) {
	ctx := context.Background()
	req := func(pool string, gpus int, vram uint64) juiceapi.SessionRequest {
		return juiceapi.SessionRequest{PoolID: pool, GPUs: gpus, VRAMPerGPU: vram}
	}
	for _, c := range []struct {
		name     string
		cfg      juicesim.Config
		mod      func(*juiceapi.HTTPConfig)
		call     func(e *env) error
		route    string
		kind     error
		status   int
		text     string
		attempts int // requests the simulator answered on route; -1 = do not check
	}{
		{name: "unauthorized", cfg: juicesim.Config{Token: "m2m_other"},
			call:  func(e *env) error { _, err := e.client.Status(ctx); return err },
			route: "GET /v1/status", kind: juiceapi.ErrUnauthorized, status: 401, text: "Failed to validate JWT.", attempts: 1},
		{name: "unauthorized on request", cfg: juicesim.Config{Token: "m2m_other"},
			call: func(e *env) error {
				_, err := e.client.RequestSession(ctx, uuid.New(), req("test", 1, 0))
				return err
			},
			route: "GET /v1/pools", kind: juiceapi.ErrUnauthorized, status: 401, attempts: 1},
		{name: "not found", call: func(e *env) error { _, err := e.client.GetSession(ctx, "nope"); return err },
			route: "GET /v1/session/{id}", kind: juiceapi.ErrNotFound, status: 500, text: "session nope not found", attempts: 1},
		{name: "cancel unknown: read first, no DELETE", call: func(e *env) error { return e.client.CancelSession(ctx, "nope") },
			route: "GET /v1/session/{id}", kind: juiceapi.ErrNotFound, status: 500, attempts: 1},
		{name: "no capacity: unknown pool",
			call: func(e *env) error {
				_, err := e.client.RequestSession(ctx, uuid.New(), req("nope", 1, 0))
				return err
			},
			route: "POST /v1/request/session", kind: juiceapi.ErrNoCapacity, text: `not sent: pool "nope" does not exist`, attempts: 0},
		{name: "no capacity: too many GPUs",
			call: func(e *env) error {
				_, err := e.client.RequestSession(ctx, uuid.New(), req("test", 9, 0))
				return err
			},
			route: "POST /v1/request/session", kind: juiceapi.ErrNoCapacity, text: "can ever fit 9 GPU(s)", attempts: 0},
		{name: "no capacity: too much VRAM",
			call: func(e *env) error {
				_, err := e.client.RequestSession(ctx, uuid.New(), req("test", 1, 81*G))
				return err
			},
			route: "POST /v1/request/session", kind: juiceapi.ErrNoCapacity, text: "x 81GiB", attempts: 0},
		{name: "no capacity: no matching label",
			call: func(e *env) error {
				r := req("test", 1, 0)
				r.MatchLabels = map[string]string{"gpu": "h100"}
				_, err := e.client.RequestSession(ctx, uuid.New(), r)
				return err
			},
			route: "POST /v1/request/session", kind: juiceapi.ErrNoCapacity, text: "with labels", attempts: 0},
		{name: "no capacity: the controller's own refusal", cfg: juicesim.Config{Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 25, 2, 8*G)}},
			call: func(e *env) error { // 25 agents: more than one legacy page, so the client cannot tell and sends it
				_, err := e.client.RequestSession(ctx, uuid.New(), req("test", 4, 0))
				return err
			},
			route: "POST /v1/request/session", kind: juiceapi.ErrNoCapacity, status: 500, text: "no capacity: no agent in pool", attempts: 1},
		{name: "unavailable: 5xx every time", cfg: juicesim.Config{Faults: juicesim.Faults{ErrorRate: 1}},
			call:  func(e *env) error { _, err := e.client.GetSession(ctx, "x"); return err },
			route: "GET /v1/session/{id}", kind: juiceapi.ErrUnavailable, status: 500, text: "simulated fault", attempts: 4},
		{name: "unavailable: dropped connections", cfg: juicesim.Config{Faults: juicesim.Faults{DropRate: 1}},
			call:  func(e *env) error { return e.client.CancelSession(ctx, "x") },
			route: "GET /v1/session/{id}", kind: juiceapi.ErrUnavailable, text: "EOF", attempts: 4},
		{name: "unavailable: hangs cut by the attempt timeout", cfg: juicesim.Config{Faults: juicesim.Faults{HangRate: 1}},
			mod:   func(h *juiceapi.HTTPConfig) { h.Timeout, h.MaxAttempts = 100*time.Millisecond, 2 },
			call:  func(e *env) error { _, err := e.client.ListAgents(ctx, "test"); return err },
			route: "GET /v1/agents", kind: context.DeadlineExceeded, text: "deadline exceeded", attempts: 2},
		{name: "unavailable: nobody listening",
			call: func(e *env) error {
				_ = e.srv.Close()
				_, err := e.client.Status(ctx)
				return err
			},
			kind: juiceapi.ErrUnavailable, text: "connection refused", attempts: -1},
		{name: "unexpected: wrong base URL",
			mod:  func(h *juiceapi.HTTPConfig) { h.BaseURL += "/wrong" },
			call: func(e *env) error { _, err := e.client.Status(ctx); return err },
			kind: juiceapi.ErrUnexpected, status: 404, attempts: -1},
		{name: "caller's deadline bounds the retries", cfg: juicesim.Config{Faults: juicesim.Faults{ErrorRate: 1}},
			mod: func(h *juiceapi.HTTPConfig) {
				h.MaxAttempts, h.InitialBackoff, h.MaxBackoff = 100, time.Second, time.Second
			},
			call: func(e *env) error {
				ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				defer cancel()
				_, err := e.client.Status(ctx)
				return err
			},
			route: "GET /v1/status", kind: context.DeadlineExceeded, status: 500, attempts: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := start(t, c.cfg, c.mod)
			err := c.call(e)
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, c.kind) {
				t.Fatalf("error %q is not %v", err, c.kind)
			}
			var ae *juiceapi.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("error %q is not an *APIError", err)
			}
			if c.kind == context.DeadlineExceeded && !errors.Is(err, juiceapi.ErrUnavailable) {
				t.Errorf("a deadline should also read as unavailable: %v", err)
			}
			if ae.StatusCode != c.status {
				t.Errorf("status %d, want %d (%v)", ae.StatusCode, c.status, err)
			}
			if !strings.Contains(err.Error(), c.text) {
				t.Errorf("error %q lacks %q", err, c.text)
			}
			if c.attempts >= 0 {
				if got := requests(t, e.sim, c.route); got != c.attempts && !(c.text == "EOF" || c.kind == context.DeadlineExceeded) {
					t.Errorf("%d requests reached the simulator, want %d", got, c.attempts)
				}
			}
			if strings.Contains(err.Error(), testToken) || strings.Contains(err.Error(), "m2m_other") {
				t.Fatalf("token in error: %q", err)
			}
		})
	}
}

// TestRequestOnTheWire checks what the client sends: bearer token, Idempotency-Key, JSON body with
// the legacy field names and one requirement per GPU, VRAM in bytes.
func TestRequestOnTheWire(t *testing.T) {
	sim, err := juicesim.New(juicesim.Config{Token: testToken, Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 1, 4, 80*G)}}, nilLog())
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	var mu sync.Mutex
	var got *http.Request
	var body []byte
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		if r.Method == http.MethodPost {
			got, body = r.Clone(context.Background()), b
		}
		mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		sim.ServeHTTP(w, r)
	}))
	defer ts.Close()
	c, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: ts.URL, TokenFile: writeToken(t, t.TempDir(), testToken, 0o400), Version: "juice-slurm/test"})
	if err != nil {
		t.Fatal(err)
	}
	key := uuid.New()
	id, err := c.RequestSession(context.Background(), key, juiceapi.SessionRequest{PoolID: "test", GPUs: 2, VRAMPerGPU: 1536 * vram.MiB,
		Tolerates: map[string]string{}})
	if err != nil {
		t.Fatalf("request: %v (%s)", err, id)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Method != "POST" || got.URL.Path != "/v1/request/session" {
		t.Errorf("%s %s", got.Method, got.URL.Path)
	}
	for h, want := range map[string]string{"Authorization": "Bearer " + testToken, "Idempotency-Key": key.String(), "Content-Type": "application/json"} {
		if got.Header.Get(h) != want {
			t.Errorf("header %s = %q, want %q", h, got.Header.Get(h), want)
		}
	}
	var wire map[string]any
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	// The key travels in the version field too: the legacy controller ignores the header but echoes the version.
	want := `{"gpus":[{"pciBus":"","vramRequired":1610612736},{"pciBus":"","vramRequired":1610612736}],"matchLabels":null,"poolId":"test","tolerates":{},"version":"juice-slurm/test key=` + key.String() + `"}`
	if b, _ := json.Marshal(wire); string(b) != want {
		t.Errorf("body\n%s\nwant\n%s", b, want)
	}
}

func TestListAgentsAndStatus(t *testing.T) {
	e := start(t, juicesim.Config{Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 2, 8, 80*G), juicesim.UniformPool("demo", 1, 2, 24*G)}}, nil)
	ctx := context.Background()
	st, err := e.client.Status(ctx)
	if err != nil || st.State != "Active" {
		t.Fatalf("status: %+v %v", st, err)
	}
	id, err := e.client.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "demo", GPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	agents, err := e.client.ListAgents(ctx, "demo")
	if err != nil || len(agents) != 1 || len(agents[0].GPUs) != 2 || agents[0].GPUs[1].VRAM != 24*G {
		t.Fatalf("agents: %+v %v", agents, err)
	}
	if len(agents[0].Sessions) != 1 || agents[0].Sessions[0].ID != id || agents[0].Sessions[0].IdempotencyKey == "" {
		t.Fatalf("agent sessions: %+v", agents[0].Sessions)
	}
	all, err := e.client.ListAgents(ctx, "")
	if err != nil || len(all) != 3 {
		t.Fatalf("all agents: %d %v", len(all), err)
	}
	if _, err := e.client.ListAgents(ctx, "nope"); !errors.Is(err, juiceapi.ErrNotFound) {
		t.Fatalf("unknown pool: %v", err)
	}
}

func TestClientValidatesLocally(t *testing.T) {
	e := start(t, juicesim.Config{}, nil)
	ctx := context.Background()
	for _, r := range []juiceapi.SessionRequest{{GPUs: 1}, {PoolID: "test"}, {PoolID: "test", GPUs: -1}} {
		if _, err := e.client.RequestSession(ctx, uuid.New(), r); err == nil {
			t.Errorf("%+v accepted", r)
		}
	}
	if _, err := e.client.RequestSession(ctx, uuid.Nil, juiceapi.SessionRequest{PoolID: "test", GPUs: 1}); err == nil {
		t.Error("nil key accepted")
	}
	if _, err := e.client.GetSession(ctx, "../status"); err == nil {
		t.Error("path in id accepted")
	}
	if n := requests(t, e.sim, "POST /v1/request/session"); n != 0 {
		t.Errorf("%d invalid requests were sent", n)
	}
	if _, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: "ftp://x", TokenFile: e.tokenPath}); err == nil {
		t.Error("ftp URL accepted")
	}
}

// TestPostSentOnce: without IdempotentRequests a POST that failed is not repeated by the client (the legacy
// controller would book a second session); with it, it is retried like a GET.
func TestPostSentOnce(t *testing.T) {
	for _, idem := range []bool{false, true} {
		t.Run(fmt.Sprintf("idempotent=%v", idem), func(t *testing.T) {
			sim, err := juicesim.New(juicesim.Config{Token: testToken, Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 1, 4, 80*G)}}, nilLog())
			if err != nil {
				t.Fatal(err)
			}
			defer sim.Close()
			var posts atomic.Int32
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					posts.Add(1)
					sim.ServeHTTP(httptest.NewRecorder(), r) // booked, then the answer is an outage
					http.Error(w, "bad gateway", http.StatusBadGateway)
					return
				}
				sim.ServeHTTP(w, r)
			}))
			defer ts.Close()
			c, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: ts.URL, TokenFile: writeToken(t, t.TempDir(), testToken, 0o400),
				MaxAttempts: 3, InitialBackoff: time.Millisecond, IdempotentRequests: idem})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.RequestSession(context.Background(), uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
			if !errors.Is(err, juiceapi.ErrUnavailable) {
				t.Fatalf("want unavailable, got %v", err)
			}
			want := int32(1)
			if idem {
				want = 3
			}
			if got := posts.Load(); got != want {
				t.Fatalf("%d POSTs, want %d", got, want)
			}
		})
	}
}

// The check before a request (can any agent ever hold it?) lists the pool once for many requests: a listing per
// request cost a pool of 1,250 agents a 4 MiB answer per session. A request the kept listing says cannot fit is
// checked against a new listing before it is refused: an agent may have joined since.
func TestRequestChecksThePoolOnceForManyRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := start(t, juicesim.Config{}, nil)
	for i := 0; i < 5; i++ {
		_, err := e.client.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
		require.NoError(t, err)
	}
	require.Equal(t, 5, requests(t, e.sim, "POST /v1/request/session"))
	require.Equal(t, 1, requests(t, e.sim, "GET /v1/agents"), "one listing served the five checks")

	_, err := e.client.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 9})
	require.ErrorIs(t, err, juiceapi.ErrNoCapacity)
	require.Equal(t, 2, requests(t, e.sim, "GET /v1/agents"), "a refusal is checked on a new listing")
	require.Equal(t, 5, requests(t, e.sim, "POST /v1/request/session"), "the refused request was not sent")
}

// slowListing delays every agent listing, so that checks made together find the pool's view stale together.
type slowListing struct{ next http.RoundTripper }

func (s slowListing) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && r.URL.Path == "/v1/agents" {
		time.Sleep(200 * time.Millisecond)
	}
	return s.next.RoundTrip(r)
}

// Workers that check the same pool together share one listing of its agents (a big pool's listing is tens of
// MiB, which each decoding its own copy multiplied).
func TestChecksMadeTogetherShareOneListing(t *testing.T) {
	t.Parallel()
	e := start(t, juicesim.Config{}, func(hc *juiceapi.HTTPConfig) {
		hc.HTTPClient = &http.Client{Transport: slowListing{http.DefaultTransport}}
	})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.client.RequestSession(context.Background(), uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, 1, requests(t, e.sim, "GET /v1/agents"), "eight checks made together, one listing")
	require.Equal(t, 8, requests(t, e.sim, "POST /v1/request/session"))
}

// A check that shares a listing begun by one whose time then runs out lists the pool itself: the other's
// deadline is not its own.
func TestASharedListingCutShortIsTakenAgain(t *testing.T) {
	t.Parallel()
	e := start(t, juicesim.Config{}, func(hc *juiceapi.HTTPConfig) {
		hc.HTTPClient = &http.Client{Transport: slowListing{http.DefaultTransport}}
	})
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := e.client.RequestSession(short, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
		first <- err
	}()
	time.Sleep(10 * time.Millisecond) // the first listing under way
	_, err := e.client.RequestSession(context.Background(), uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
	require.NoError(t, err, "the second check's own time had not run out")
	require.ErrorIs(t, <-first, context.DeadlineExceeded)
}
