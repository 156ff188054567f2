//go:build legacy

// Tests against the legacy open-source Juice controller that test/juicelegacy/legacy.sh up runs (JWT validation
// on, our issuer, our agent emulator). They bring nothing up: they read the env file that up writes, skip when it
// is absent and fail when CI=true.
//
//	make juice-legacy-up && make test-juice-legacy-smoke        (JUICE_LEGACY_LOSS=1 adds the ~40 s agent-loss test)
package juicelegacy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/juice-slurm/juice-slurm/test/juicelegacy/issuer"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

const defaultEnvFile = "/var/tmp/juice-testbed/legacy/env"

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

type legacyEnv struct {
	testbed.Env
	pools map[string]string
	token string
}

func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start it with: make juice-legacy-up)"
	if testbed.InCI() {
		t.Fatalf("CI=true and the legacy controller is missing: %s", msg)
	}
	t.Skip(msg)
}

// requireLegacy reads the env file of legacy.sh up and checks the controller answers.
func requireLegacy(t *testing.T) legacyEnv {
	t.Helper()
	path := os.Getenv("JUICE_LEGACY_ENV")
	if path == "" {
		path = defaultEnvFile
	}
	env, err := testbed.Load(path)
	if err != nil {
		unavailable(t, "legacy env file: %v", err)
	}
	e := legacyEnv{Env: env, pools: map[string]string{}}
	for _, kv := range strings.Split(env.Get("JUICE_LEGACY_POOLS"), ",") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			e.pools[k] = v
		}
	}
	b, err := os.ReadFile(env.Get("JUICE_LEGACY_TOKEN_FILE"))
	if err != nil {
		unavailable(t, "token file: %v", err)
	}
	e.token = strings.TrimSpace(string(b))
	resp, err := http.Get(e.url("/v1/status"))
	if err != nil {
		unavailable(t, "legacy controller at %s: %v", e.Get("JUICE_LEGACY_URL"), err)
	}
	resp.Body.Close()
	return e
}

func (e legacyEnv) url(path string) string { return e.Get("JUICE_LEGACY_URL") + path }

// reply is one HTTP answer, kept whole for the facts the tests check and log.
type reply struct {
	status int
	ctype  string
	body   string
}

func (r reply) String() string { return fmt.Sprintf("%d %s %q", r.status, r.ctype, r.body) }

// call makes a raw request; token "" sends no Authorization header.
func call(t *testing.T, method, url, token, ctype string, body []byte) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, ctype: resp.Header.Get("Content-Type"), body: string(b)}
}

func (e legacyEnv) get(t *testing.T, path string) reply {
	return call(t, http.MethodGet, e.url(path), e.token, "", nil)
}

type session struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Address string `json:"address"`
	Version string `json:"version"`
	PoolID  string `json:"poolId"`
	GPUs    []struct {
		Index        int    `json:"index"`
		VRAMRequired uint64 `json:"vramRequired"`
	} `json:"gpus"`
}

func (e legacyEnv) session(t *testing.T, id string) session {
	t.Helper()
	r := e.get(t, "/v1/session/"+id)
	if r.status != 200 || r.ctype != "application/json" {
		t.Fatalf("GET /v1/session/%s: %s", id, r)
	}
	var s session
	if err := json.Unmarshal([]byte(r.body), &s); err != nil {
		t.Fatalf("GET /v1/session/%s: %v in %s", id, err, r.body)
	}
	return s
}

// requestSession is POST /v1/request/session with the legacy SessionRequirements.
func (e legacyEnv) requestSession(t *testing.T, req map[string]any) string {
	t.Helper()
	b, _ := json.Marshal(req)
	r := call(t, http.MethodPost, e.url("/v1/request/session"), e.token, "application/json", b)
	if r.status != 200 || r.ctype != "text/plain" || !uuidRE.MatchString(r.body) {
		t.Fatalf("POST /v1/request/session: %s", r)
	}
	return r.body
}

// cancelOnCleanup cancels the session when the test ends, unless it is already canceling or closed: the
// controller reopens a closed session as canceling, and the agent then exits.
func (e legacyEnv) cancelOnCleanup(t *testing.T, id string) {
	t.Cleanup(func() {
		r := e.get(t, "/v1/session/"+id)
		var s session
		_ = json.Unmarshal([]byte(r.body), &s)
		if s.State == "canceling" || s.State == "closed" {
			return
		}
		call(t, http.MethodDelete, e.url("/v1/session/"+id), e.token, "", nil)
		t.Logf("cleanup: cancelled session %s (was %q)", id, s.State)
	})
}

type transition struct {
	state string
	at    time.Duration
}

func (tr transition) String() string {
	st := tr.state
	if st == "" {
		st = `""`
	}
	return fmt.Sprintf("%s@%s", st, tr.at.Round(time.Millisecond))
}

// watch polls GET /v1/session/{id} every 50 ms until the state is final or the time is up, and returns each
// state seen with when it was first seen.
func (e legacyEnv) watch(t *testing.T, id, final string, within time.Duration) ([]transition, session) {
	t.Helper()
	start := time.Now()
	var seen []transition
	var s session
	for {
		s = e.session(t, id)
		if len(seen) == 0 || seen[len(seen)-1].state != s.State {
			seen = append(seen, transition{s.State, time.Since(start)})
		}
		if s.State == final {
			return seen, s
		}
		if time.Since(start) > within {
			t.Fatalf("session %s not %s after %s: states %v", id, final, within, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// monotone checks the states seen follow the order given (each may be missed, none may come back).
func monotone(t *testing.T, seen []transition, order ...string) {
	t.Helper()
	pos := map[string]int{}
	for i, s := range order {
		pos[s] = i
	}
	last := -1
	for _, tr := range seen {
		p, ok := pos[tr.state]
		if !ok || p < last {
			t.Fatalf("states %v: %q out of the order %q", seen, tr.state, order)
		}
		last = p
	}
}

// emuSession is the agent emulator's record of a session (GET /sessions/{id} of its admin API).
type emuSession struct {
	Agent   string `json:"agent"`
	AgentID string `json:"agentId"`
	Held    bool   `json:"held"`
	Events  []struct {
		Kind string    `json:"kind"`
		Time time.Time `json:"time"`
	} `json:"events"`
}

func (e legacyEnv) emuSession(t *testing.T, id string) emuSession {
	t.Helper()
	r := call(t, http.MethodGet, e.Get("JUICE_LEGACY_AGENTS_URL")+"/sessions/"+id, "", "", nil)
	var s emuSession
	if err := json.Unmarshal([]byte(r.body), &s); err != nil {
		t.Fatalf("agent emulator /sessions/%s: %s", id, r)
	}
	return s
}

func (s emuSession) kinds() []string {
	var out []string
	for _, ev := range s.Events {
		out = append(out, ev.Kind)
	}
	return out
}

// agentState is the agent's state in GET /v1/agent/{id}.
func (e legacyEnv) agentState(t *testing.T, id string) string {
	t.Helper()
	r := e.get(t, "/v1/agent/"+id)
	var a struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(r.body), &a); err != nil {
		t.Fatalf("GET /v1/agent/%s: %s", id, r)
	}
	return a.State
}

// requireAgentsRunning fails unless the emulated agents whose names start with prefix all run: an agent that
// exited (as a real agent would, say after the controller restarted) takes no session.
func (e legacyEnv) requireAgentsRunning(t *testing.T, prefix string) {
	t.Helper()
	r := call(t, http.MethodGet, e.Get("JUICE_LEGACY_AGENTS_URL")+"/agents", "", "", nil)
	var agents []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(r.body), &agents); err != nil {
		t.Fatalf("agent emulator /agents: %s", r)
	}
	n := 0
	for _, a := range agents {
		if strings.HasPrefix(a.Name, prefix) {
			n++
			if a.State != "running" {
				t.Fatalf("emulated agent %s is %s (%s): resume it (POST %s/agents/%s/resume or /restart) or run make juice-legacy-down juice-legacy-up",
					a.Name, a.State, a.Reason, e.Get("JUICE_LEGACY_AGENTS_URL"), a.Name)
			}
		}
	}
	if n == 0 {
		t.Fatalf("no emulated agent named %s*", prefix)
	}
}

func (e legacyEnv) controllerAlive(t *testing.T) {
	t.Helper()
	resp, err := http.Get(e.url("/v1/status"))
	if err != nil {
		t.Fatalf("the legacy controller no longer answers: %v (log: %s/controller.log)", err, e.Get("JUICE_LEGACY_LOG_DIR"))
	}
	resp.Body.Close()
}

func TestLegacyAuth(t *testing.T) {
	e := requireLegacy(t)
	is, err := issuer.Load(e.Get("JUICE_LEGACY_ISSUER_DIR"))
	if err != nil {
		t.Fatalf("issuer directory: %v", err)
	}
	aud := []string{e.Get("JUICE_LEGACY_AUDIENCE")}
	mint := func(h issuer.Header, c issuer.Claims) string {
		if c.Subject == "" {
			c.Subject = "juice-legacy-auth-test"
		}
		tok, err := is.MintWithHeader(h, c)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	hour := time.Now().Add(time.Hour)

	r := call(t, http.MethodGet, e.url("/v1/status"), "", "", nil)
	if r.status != 200 || r.ctype != "application/json" || !strings.Contains(r.body, `"state":"Active"`) {
		t.Errorf("GET /v1/status without a token: %s", r)
	}
	const denied = `{"message":"Failed to validate JWT."}`
	cases := []struct {
		name  string
		token string
		want  int
	}{
		{"no token", "", 401},
		{"not a JWT", "abc.def.ghi", 401},
		{"good", e.token, 200},
		{"no exp (accepted)", mint(issuer.Header{}, issuer.Claims{Audience: aud}), 200},
		{"expired 2 min ago", mint(issuer.Header{}, issuer.Claims{Audience: aud, Expiry: time.Now().Add(-2 * time.Minute)}), 401},
		{"expired 30 s ago (1 min leeway)", mint(issuer.Header{}, issuer.Claims{Audience: aud, Expiry: time.Now().Add(-30 * time.Second)}), 200},
		{"wrong audience", mint(issuer.Header{}, issuer.Claims{Audience: []string{"other"}, Expiry: hour}), 401},
		{"audience list containing ours", mint(issuer.Header{}, issuer.Claims{Audience: []string{"other", aud[0]}, Expiry: hour}), 200},
		{"issuer without trailing slash", mint(issuer.Header{}, issuer.Claims{Issuer: strings.TrimSuffix(is.Config.Issuer, "/"), Audience: aud, Expiry: hour}), 401},
		{"no kid", mint(issuer.Header{NoKID: true}, issuer.Claims{Audience: aud, Expiry: hour}), 401},
		{"unknown kid", mint(issuer.Header{KeyID: "nope"}, issuer.Claims{Audience: aud, Expiry: hour}), 401},
		{"alg RS512 in the header", mint(issuer.Header{Alg: "RS512"}, issuer.Claims{Audience: aud, Expiry: hour}), 401},
		{"iat 2 min in the future", mint(issuer.Header{}, issuer.Claims{Audience: aud, Expiry: hour, IssuedAt: time.Now().Add(2 * time.Minute)}), 401},
	}
	for _, c := range cases {
		r := call(t, http.MethodGet, e.url("/v1/agents"), c.token, "", nil)
		t.Logf("%-32s GET /v1/agents -> %d %s", c.name, r.status, r.ctype)
		if r.status != c.want {
			t.Errorf("%s: got %s, want %d", c.name, r, c.want)
		}
		if c.want == 401 && (r.ctype != "application/json" || r.body != denied) {
			t.Errorf("%s: denial %s, want application/json %s", c.name, r, denied)
		}
	}
	// A malformed Authorization header is denied the same way.
	req, _ := http.NewRequest(http.MethodGet, e.url("/v1/agents"), nil)
	req.Header.Set("Authorization", "Token "+e.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || string(b) != denied {
		t.Errorf("Authorization: Token ...: %d %q", resp.StatusCode, b)
	}
}

func TestLegacyErrorAnswers(t *testing.T) {
	e := requireLegacy(t)
	unknown := "5d1a2c3b-0000-4000-8000-000000000000"
	for _, c := range []struct {
		method, path, ctype, body string
		want                      int
		wantBody                  string
	}{
		{"GET", "/v1/session/" + unknown, "", "", 500, "object not found\nrecord not found"},
		{"GET", "/v1/session/not-a-uuid", "", "", 500, "object not found\nrecord not found"},
		{"DELETE", "/v1/session/" + unknown, "", "", 500, "object not found\nrecord not found"},
		{"GET", "/v1/agent/" + unknown, "", "", 500, "object not found\nrecord not found"},
		{"GET", "/v1/pool/" + e.pools["test"], "", "", 500, "object not found\nrecord not found"}, // even an existing pool
		{"POST", "/v1/request/session", "text/plain", `{"poolId":"x","gpus":[{}]}`, 500,
			"expected Content-Type=application/json, received text/plain"},
		{"POST", "/v1/request/session", "application/json; charset=utf-8", `{"poolId":"x","gpus":[{}]}`, 500,
			"expected Content-Type=application/json, received application/json; charset=utf-8"},
		{"GET", "/v1/sessions", "", "", 404, "404 page not found\n"},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := call(t, c.method, e.url(c.path), e.token, c.ctype, body)
		t.Logf("%s %s -> %s", c.method, c.path, r)
		if r.status != c.want || r.body != c.wantBody {
			t.Errorf("%s %s: got %s, want %d %q", c.method, c.path, r, c.want, c.wantBody)
		}
	}
	e.controllerAlive(t)
}

func TestLegacySessionLifecycle(t *testing.T) {
	e := requireLegacy(t)
	pool := e.pools["test"]
	if pool == "" {
		t.Fatalf("no pool test in JUICE_LEGACY_POOLS=%s", e.Get("JUICE_LEGACY_POOLS"))
	}
	e.requireAgentsRunning(t, "emu-test")
	start := time.Now()
	id := e.requestSession(t, map[string]any{
		"version": "juice-slurm-legacy-test", "poolId": pool,
		"gpus":        []map[string]any{{"vramRequired": 0, "pciBus": ""}},
		"matchLabels": map[string]string{}, "tolerates": map[string]string{},
	})
	e.cancelOnCleanup(t, id)
	t.Logf("POST /v1/request/session -> %s in %s", id, time.Since(start).Round(time.Millisecond))

	// A queued session reads back with empty fields ("id":"", "state":""): "" stands for queued here.
	seen, s := e.watch(t, id, "active", 20*time.Second)
	t.Logf("states until active: %v", seen)
	monotone(t, seen, "", "queued", "assigned", "active")
	if s.ID != id || s.PoolID != pool || s.Version != "juice-slurm-legacy-test" || len(s.GPUs) == 0 || s.Address == "" {
		t.Errorf("active session %+v", s)
	}

	// The emulated agent saw it assigned and reported it active: the whole chain ran.
	es := e.emuSession(t, id)
	if !es.Held || !strings.HasPrefix(es.Agent, "emu-test") {
		t.Errorf("emulator: session %s held=%v by %q, want held by an emu-test agent (events %v)", id, es.Held, es.Agent, es.kinds())
	}
	if k := strings.Join(es.kinds(), ","); k != "assigned-seen,active-reported" {
		t.Errorf("emulator events %s, want assigned-seen,active-reported", k)
	}
	t.Logf("active after %s on %s (%s), %d GPUs: %+v", seen[len(seen)-1].at.Round(time.Millisecond), es.Agent, s.Address, len(s.GPUs), s.GPUs)

	r := call(t, http.MethodDelete, e.url("/v1/session/"+id), e.token, "", nil)
	if want := fmt.Sprintf("%q", "Session "+id+" cancelled"); r.status != 200 || r.ctype != "application/json" || r.body != want {
		t.Fatalf("DELETE /v1/session/%s: %s, want 200 application/json %s", id, r, want)
	}
	seen, _ = e.watch(t, id, "closed", 20*time.Second)
	t.Logf("states until closed: %v", seen)
	monotone(t, seen, "active", "canceling", "closed")
	es = e.emuSession(t, id)
	if es.Held {
		t.Errorf("emulator still holds %s after close", id)
	}
	if k, want := strings.Join(es.kinds(), ","), "assigned-seen,active-reported,canceling-seen,closed-reported"; k != want {
		t.Errorf("emulator events %s, want %s", k, want)
	}
	e.controllerAlive(t)
}

// TestLegacyAgentLoss stops an emulated agent's updates (agent loss) and waits for the controller to mark it
// missing (about 30 s), then resumes it. Slow: it runs only with JUICE_LEGACY_LOSS=1.
func TestLegacyAgentLoss(t *testing.T) {
	if os.Getenv("JUICE_LEGACY_LOSS") != "1" {
		t.Skip("agent loss takes about 40 s: set JUICE_LEGACY_LOSS=1 (make test-juice-legacy-loss)")
	}
	e := requireLegacy(t)
	admin := e.Get("JUICE_LEGACY_AGENTS_URL")
	e.requireAgentsRunning(t, "emu-loss")
	// emu-loss alone has label role=loss and taint dedicated=loss: only this request fits it, and no other
	// request (tolerating nothing) lands on it.
	id := e.requestSession(t, map[string]any{
		"version": "juice-slurm-legacy-test", "poolId": e.pools["test"],
		"gpus":        []map[string]any{{"vramRequired": 0}},
		"matchLabels": map[string]string{"role": "loss"}, "tolerates": map[string]string{"dedicated": "loss"},
	})
	e.cancelOnCleanup(t, id)
	_, _ = e.watch(t, id, "active", 20*time.Second)
	es := e.emuSession(t, id)
	if es.Agent != "emu-loss" {
		t.Fatalf("session on %q, want emu-loss", es.Agent)
	}
	agentID := es.AgentID

	if r := call(t, http.MethodPost, admin+"/agents/emu-loss/stop", "", "", nil); r.status != 200 {
		t.Fatalf("stop emu-loss: %s", r)
	}
	t.Cleanup(func() { call(t, http.MethodPost, admin+"/agents/emu-loss/resume", "", "", nil) })
	stopped := time.Now()
	var state string
	for state != "missing" {
		if time.Since(stopped) > 90*time.Second {
			t.Fatalf("agent %s still %q 90 s after it stopped reporting", agentID, state)
		}
		time.Sleep(250 * time.Millisecond)
		state = e.agentState(t, agentID)
	}
	lost := time.Since(stopped)
	t.Logf("agent %s missing %s after it stopped reporting", agentID, lost.Round(100*time.Millisecond))
	if lost < 25*time.Second || lost > 45*time.Second {
		t.Errorf("missing after %s, want about 30 s (+ up to 1 s for the backend tick)", lost)
	}
	if r := e.get(t, "/v1/agents"); strings.Contains(r.body, agentID) {
		t.Errorf("GET /v1/agents still lists the missing agent")
	}
	s := e.session(t, id)
	t.Logf("its session %s is %q while the agent is missing", id, s.State)

	if r := call(t, http.MethodPost, admin+"/agents/emu-loss/resume", "", "", nil); r.status != 200 {
		t.Fatalf("resume emu-loss: %s", r)
	}
	resumed := time.Now()
	for state = ""; state != "active"; state = e.agentState(t, agentID) {
		if time.Since(resumed) > 10*time.Second {
			t.Fatalf("agent %q, not active again 10 s after it resumed", state)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("agent active again %s after it resumed", time.Since(resumed).Round(100*time.Millisecond))
	call(t, http.MethodDelete, e.url("/v1/session/"+id), e.token, "", nil)
	_, _ = e.watch(t, id, "closed", 20*time.Second)
	e.controllerAlive(t)
}
