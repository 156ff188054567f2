package agentemu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeController is a small stand-in for the legacy controller's agent endpoints, answering exactly as its
// pkg/net helpers do (text/plain ids, application/json agents with a Content-Length, empty 200 on PUT).
type fakeController struct {
	t        *testing.T
	mu       sync.Mutex
	token    string
	agents   map[string]*AgentInfo
	puts     []map[string]any // raw PUT bodies
	register []map[string]any
	padding  int // extra bytes in GET /v1/agent/{id} (to pass the single-Read limit)
	getFail  int // answer the next n GETs with 500
}

func (f *fakeController) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+f.token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"message":"Failed to validate JWT."}`))
		return
	}
	text := func(code int, s string) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", fmt.Sprint(len(s)))
		w.WriteHeader(code)
		_, _ = io.WriteString(w, s)
	}
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/register/agent":
		if r.Header.Get("Content-Type") != "application/json" {
			text(500, "expected Content-Type=application/json")
			return
		}
		var raw map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &raw)
		f.register = append(f.register, raw)
		var a AgentInfo
		_ = json.Unmarshal(b, &a)
		a.ID = fmt.Sprintf("00000000-0000-4000-8000-%012d", len(f.agents)+1)
		a.Sessions = []Session{}
		f.agents[a.ID] = &a
		text(200, a.ID)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/agent/"):
		a := f.agents[strings.TrimPrefix(r.URL.Path, "/v1/agent/")]
		if a == nil {
			text(500, "object not found\nrecord not found")
			return
		}
		if f.getFail > 0 {
			f.getFail--
			text(500, "simulated")
			return
		}
		b, _ := json.Marshal(a)
		if f.padding > 0 {
			b = append(b[:len(b)-1], []byte(`,"pad":"`+strings.Repeat("x", f.padding)+`"}`)...)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		_, _ = w.Write(b)
	case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/"):
		b, _ := io.ReadAll(r.Body)
		var raw map[string]any
		_ = json.Unmarshal(b, &raw)
		f.puts = append(f.puts, raw)
		var u AgentUpdate
		_ = json.Unmarshal(b, &u)
		a := f.agents[u.ID]
		if a == nil {
			text(500, "record not found")
			return
		}
		a.State = u.State
		for i := range a.Sessions {
			if su, ok := u.Sessions[a.Sessions[i].ID]; ok {
				a.Sessions[i].State = su.State
			}
		}
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}

// setSessions replaces the sessions the agent is listed with (closed ones are not listed, as in the controller).
func (f *fakeController) setSessions(id string, ss ...Session) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.agents[id].Sessions = ss
}

func (f *fakeController) sessionState(id, sid string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.agents[id].Sessions {
		if s.ID == sid {
			return s.State
		}
	}
	return ""
}

func (f *fakeController) lastPut() map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.puts) == 0 {
		return nil
	}
	return f.puts[len(f.puts)-1]
}

const testPool = "5a0e8a53-7f3c-4b8e-9d65-6c1f0a2b3c4d"

func startEmu(t *testing.T, mut func(*Config)) (*Emulator, *fakeController) {
	t.Helper()
	f := &fakeController{t: t, token: "tok-1", agents: map[string]*AgentInfo{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte("tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		// host:port, no scheme: the emulator must probe https first and fall back to http, like the real agent.
		Controller: strings.TrimPrefix(srv.URL, "http://"),
		TokenFile:  tokFile,
		Interval:   Duration(20 * time.Millisecond),
		Pools:      map[string]string{"test": testPool},
		Agents:     []AgentConfig{{Name: "g", Pool: "test", GPUs: 2, VRAM: Size(16 * gib), Labels: map[string]string{"role": "x"}}},
	}
	if mut != nil {
		mut(&cfg)
	}
	e, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Start(context.Background())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.Shutdown(ctx)
	})
	return e, f
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestProtocolRegisterUpdateLifecycle(t *testing.T) {
	e, f := startEmu(t, nil)
	a := e.Agents()[0]
	waitFor(t, "registration", func() bool { return a.ID() != "" })
	id := a.ID()

	f.mu.Lock()
	reg := f.register[0]
	f.mu.Unlock()
	for _, k := range []string{"id", "state", "hostname", "address", "version", "poolId", "gpus", "labels", "taints", "sessions"} {
		if _, ok := reg[k]; !ok {
			t.Errorf("registration lacks %q: %v", k, reg)
		}
	}
	if reg["poolId"] != testPool || reg["state"] != "active" {
		t.Errorf("registration %v", reg)
	}
	gpus := reg["gpus"].([]any)
	g0 := gpus[0].(map[string]any)
	if len(gpus) != 2 || g0["vram"].(float64) != float64(16*gib) || g0["index"].(float64) != 0 {
		t.Errorf("gpus %v", gpus)
	}

	waitFor(t, "a heartbeat", func() bool { return f.lastPut() != nil })
	hb := f.lastPut()
	if hb["id"] != id || hb["state"] != "active" || len(hb["gpus"].([]any)) != 2 {
		t.Errorf("heartbeat %v", hb)
	}

	f.setSessions(id, Session{ID: "s1", State: SessionAssigned, Version: "v", GPUs: []SessionGPU{{Index: 0, VRAMRequired: 0}, {Index: 1, VRAMRequired: 0}}})
	waitFor(t, "active", func() bool { return f.sessionState(id, "s1") == SessionActive })
	// The wire form of a session update: "State" with a capital S and an empty connections map.
	found := false
	f.mu.Lock()
	for _, p := range f.puts {
		if ss, ok := p["sessions"].(map[string]any); ok {
			if s1, ok := ss["s1"].(map[string]any); ok {
				found = s1["State"] == "active" && s1["connections"] != nil
			}
		}
	}
	f.mu.Unlock()
	if !found {
		t.Errorf("no PUT carried sessions.s1.State=active with connections {}")
	}
	if st := a.Status(); len(st.Sessions) != 1 || st.Sessions[0].ID != "s1" {
		t.Errorf("status %+v", st)
	}

	f.setSessions(id, Session{ID: "s1", State: SessionCanceling})
	waitFor(t, "closed", func() bool { return f.sessionState(id, "s1") == SessionClosed })
	if st := a.Status(); len(st.Sessions) != 0 || len(st.Closed) != 1 || st.State != StateRunning {
		t.Errorf("status after close %+v", st)
	}
	// An update's events are recorded once its PUT has returned, which is after the controller saw it.
	var got []string
	events := func() []string {
		got = got[:0]
		for _, ev := range e.Events(0) {
			if ev.Session == "s1" {
				got = append(got, ev.Kind)
			}
		}
		return got
	}
	waitFor(t, "the closed report's event", func() bool { return len(events()) >= 4 })
	want := []string{EventAssigned, EventActive, EventCanceling, EventClosedReport}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events %v, want %v", got, want)
	}
}

func TestProtocolCancelUnknownExitsThenResume(t *testing.T) {
	e, f := startEmu(t, nil)
	a := e.Agents()[0]
	waitFor(t, "registration", func() bool { return a.ID() != "" })
	f.setSessions(a.ID(), Session{ID: "ghost", State: SessionCanceling})
	waitFor(t, "exit", func() bool { return a.Status().State == StateExited })
	if st := a.Status(); !strings.Contains(st.Reason, "unable to cancel session") {
		t.Errorf("reason %q", st.Reason)
	}
	puts := len(f.puts)
	time.Sleep(100 * time.Millisecond)
	if len(f.puts) != puts {
		t.Errorf("an exited agent kept sending updates")
	}
	f.setSessions(a.ID())
	if err := a.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "updates after resume", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.puts) > puts })
	if st := a.Status(); st.State != StateRunning {
		t.Errorf("state %s", st.State)
	}
}

// The legacy client reads a body with one Read: a GET /v1/agent/{id} answer of more than about 4 KB fails.
func TestProtocolSingleReadLimit(t *testing.T) {
	e, f := startEmu(t, nil)
	a := e.Agents()[0]
	waitFor(t, "registration", func() bool { return a.ID() != "" })
	f.mu.Lock()
	f.padding = 20000
	f.mu.Unlock()
	waitFor(t, "exit", func() bool { return a.Status().State == StateExited })
	if st := a.Status(); !strings.Contains(st.Reason, "did not match expected content length") {
		t.Errorf("reason %q", st.Reason)
	}

	e2, f2 := startEmu(t, func(c *Config) { c.ReadWholeBody = true })
	a2 := e2.Agents()[0]
	waitFor(t, "registration", func() bool { return a2.ID() != "" })
	f2.mu.Lock()
	f2.padding = 20000
	f2.mu.Unlock()
	n := a2.Status().Gets
	waitFor(t, "more GETs", func() bool { return a2.Status().Gets > n+3 })
	if st := a2.Status(); st.State != StateRunning || st.MaxBodyBytes < 20000 {
		t.Errorf("with ReadWholeBody: %+v", st)
	}
}

func TestProtocolErrorsExitUnlessKeepGoing(t *testing.T) {
	e, f := startEmu(t, nil)
	a := e.Agents()[0]
	waitFor(t, "registration", func() bool { return a.ID() != "" })
	f.mu.Lock()
	f.getFail = 1
	f.mu.Unlock()
	waitFor(t, "exit", func() bool { return a.Status().State == StateExited })
	if st := a.Status(); !strings.Contains(st.Reason, "code 500") {
		t.Errorf("reason %q", st.Reason)
	}

	e2, f2 := startEmu(t, func(c *Config) { c.KeepGoing = true })
	a2 := e2.Agents()[0]
	waitFor(t, "registration", func() bool { return a2.ID() != "" })
	f2.mu.Lock()
	f2.getFail = 3
	f2.mu.Unlock()
	waitFor(t, "errors", func() bool { return a2.Status().Errors >= 3 })
	if st := a2.Status(); st.State != StateRunning {
		t.Errorf("keepGoing agent state %s", st.State)
	}
}

func TestProtocolStopResumeCloseAndToken(t *testing.T) {
	e, f := startEmu(t, nil)
	a := e.Agents()[0]
	waitFor(t, "registration", func() bool { return a.ID() != "" })
	a.Stop()
	if st := a.Status(); st.State != StateStopped {
		t.Fatalf("state %s", st.State)
	}
	f.mu.Lock()
	n := len(f.puts)
	f.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	if len(f.puts) != n {
		t.Errorf("a stopped agent sent updates")
	}
	// Rotate the token while stopped: the emulator re-reads the file.
	f.token = "tok-2"
	f.mu.Unlock()
	tok := e.cfg.TokenFile
	time.Sleep(10 * time.Millisecond) // a different mtime
	if err := os.WriteFile(tok, []byte("tok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = a.Resume()
	waitFor(t, "updates after resume", func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.puts) > n })

	// Through the admin API: close sends state "closed".
	adm := httptest.NewServer(e.AdminHandler())
	defer adm.Close()
	resp, err := http.Post(adm.URL+"/agents/g/close", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("close: %d", resp.StatusCode)
	}
	if p := f.lastPut(); p["state"] != "closed" {
		t.Errorf("last PUT %v", p)
	}
	resp, err = http.Get(adm.URL + "/agents")
	if err != nil {
		t.Fatal(err)
	}
	var list []Status
	_ = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if len(list) != 1 || list[0].State != StateClosed || list[0].ID != a.ID() {
		t.Errorf("agents %+v", list)
	}
	resp, _ = http.Get(adm.URL + "/healthz")
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("healthz %d", resp.StatusCode)
	}
}
