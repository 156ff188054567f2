package juicesim

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

const testToken = "m2m_sim_test_token"

type raw struct {
	t   *testing.T
	url string
	hc  *http.Client
}

func startRaw(t *testing.T, cfg Config) (*raw, *Sim) {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	s := newSim(t, cfg)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return &raw{t: t, url: ts.URL, hc: &http.Client{Timeout: 5 * time.Second}}, s
}

// do sends a request with the test token (token "" = none) and returns status, content type, body.
func (r *raw) do(method, path, token, body string, hdr ...string) (int, string, string) {
	r.t.Helper()
	req, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

func TestWireFormat(t *testing.T) {
	r, _ := startRaw(t, Config{Pools: []PoolConfig{UniformPool("test", 1, 2, 80*G)}})

	code, ct, body := r.do("GET", "/v1/status", "wrong", "")
	if code != 401 || ct != "application/json" || body != `{"message":"Failed to validate JWT."}` {
		t.Errorf("bad token: %d %s %q", code, ct, body)
	}
	if code, _, _ := r.do("GET", "/admin/sessions", "", ""); code != 401 {
		t.Errorf("admin without token: %d", code)
	}
	if code, _, body := r.do("GET", "/metrics", "", ""); code != 200 || !strings.Contains(body, "juice_sim_gpus") {
		t.Errorf("metrics: %d", code)
	}

	req := `{"version":"t","poolId":"test","gpus":[{"vramRequired":1073741824,"pciBus":""}],"matchLabels":{},"tolerates":{}}`
	code, ct, id := r.do("POST", "/v1/request/session", testToken, req, "Idempotency-Key", "k-1")
	if code != 200 || !strings.HasPrefix(ct, "text/plain") || len(id) != 36 {
		t.Fatalf("request: %d %s %q", code, ct, id)
	}
	if _, _, again := r.do("POST", "/v1/request/session", testToken, req, "Idempotency-Key", "k-1"); again != id {
		t.Errorf("same key: %s then %s", id, again)
	}
	if _, _, other := r.do("POST", "/v1/request/session", testToken, req); other == id {
		t.Errorf("no key gave the same session")
	}

	code, ct, body = r.do("GET", "/v1/session/"+id, testToken, "")
	var sess map[string]any
	if code != 200 || ct != "application/json" || json.Unmarshal([]byte(body), &sess) != nil {
		t.Fatalf("get: %d %s %q", code, ct, body)
	}
	for _, field := range []string{"id", "state", "address", "version", "poolId", "gpus", "connections"} {
		if _, ok := sess[field]; !ok {
			t.Errorf("session JSON lacks %q: %s", field, body)
		}
	}
	if !strings.Contains(body, `"gpus":[{"index":0,"vramRequired":1073741824}]`) {
		t.Errorf("gpus: %s", body)
	}

	code, ct, body = r.do("DELETE", "/v1/session/"+id, testToken, "")
	if code != 200 || ct != "application/json" || strings.TrimSpace(body) != `"Session `+id+` cancelled"` {
		t.Errorf("delete: %d %s %q", code, ct, body)
	}
	code, ct, body = r.do("GET", "/v1/session/nope", testToken, "")
	if code != 500 || !strings.HasPrefix(ct, "text/plain") || body != "session nope not found" {
		t.Errorf("not found: %d %s %q", code, ct, body)
	}
	code, _, body = r.do("POST", "/v1/request/session", testToken, `{"poolId":"test","gpus":[{},{},{}]}`)
	if code != 500 || !strings.HasPrefix(body, NoCapacityPrefix) {
		t.Errorf("no capacity: %d %q", code, body)
	}
	code, _, body = r.do("POST", "/v1/request/session", testToken, `{not json`)
	if code != 500 || !strings.Contains(body, "invalid request body") {
		t.Errorf("bad body: %d %q", code, body)
	}

	code, _, body = r.do("GET", "/admin/sessions", testToken, "")
	var all []juiceapi.Session
	if code != 200 || json.Unmarshal([]byte(body), &all) != nil || len(all) != 2 || all[0].IdempotencyKey != "k-1" {
		t.Errorf("admin sessions: %d %s", code, body)
	}
	if _, _, body := r.do("GET", "/admin/sessions?state=closed", testToken, ""); strings.Count(body, `"id"`) != 1 {
		t.Errorf("closed filter: %s", body)
	}
}

func TestAgentsAndPoolsAPI(t *testing.T) {
	clock := newFakeClock()
	r, s := startRaw(t, Config{Pools: []PoolConfig{UniformPool("test", 2, 1, 80*G)}, Now: clock.Now, AgentTimeout: 30 * time.Second})

	code, _, body := r.do("GET", "/v1/agents?pool_id=test", testToken, "")
	var agents []juiceapi.Agent
	if code != 200 || json.Unmarshal([]byte(body), &agents) != nil || len(agents) != 2 || agents[0].GPUs[0].VRAM != 80*G {
		t.Fatalf("agents: %d %s", code, body)
	}
	if code, _, body := r.do("GET", "/v1/agents?pool_id=nope", testToken, ""); code != 500 || !strings.Contains(body, "not found") {
		t.Errorf("agents of unknown pool: %d %q", code, body)
	}

	code, _, body = r.do("PUT", "/v1/pool", testToken, `{"name":"extra"}`)
	if code != 200 || !strings.Contains(body, `"id":"extra"`) {
		t.Fatalf("create pool: %d %s", code, body)
	}
	if code, _, _ := r.do("PUT", "/v1/pool", testToken, `{"name":"extra"}`); code != 500 {
		t.Errorf("duplicate pool: %d", code)
	}
	agent := `{"hostname":"gpu9","address":"10.0.0.9:43210","poolId":"extra","gpus":[{"index":0,"vram":25769803776}],"labels":{"gpu":"l4"}}`
	code, _, agentID := r.do("POST", "/v1/register/agent", testToken, agent)
	if code != 200 || agentID == "" {
		t.Fatalf("register: %d %q", code, agentID)
	}
	id, err := s.Request("", reqOf("extra", 1, 0))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := s.Session(id); v.Address != "10.0.0.9:43210" || v.State != juiceapi.StateActive {
		t.Fatalf("session on registered agent: %+v", v)
	}
	if code, _, body := r.do("DELETE", "/v1/pool/extra", testToken, ""); code != 500 || !strings.Contains(body, "still has") {
		t.Errorf("delete busy pool: %d %q", code, body)
	}
	// Heartbeats keep a registered agent; silence makes it missing and ends its sessions.
	clock.Add(20 * time.Second)
	if code, _, _ := r.do("PUT", "/v1/agent/"+agentID, testToken, `{"id":"`+agentID+`","state":""}`); code != 200 {
		t.Fatalf("heartbeat: %d", code)
	}
	clock.Add(20 * time.Second)
	s.Step()
	if v, _ := s.Session(id); v.State != juiceapi.StateActive {
		t.Fatalf("session ended despite heartbeat: %s", v.State)
	}
	clock.Add(15 * time.Second)
	s.Step()
	_, _, body = r.do("GET", "/v1/agent/"+agentID, testToken, "")
	if !strings.Contains(body, `"state":"missing"`) {
		t.Fatalf("agent after silence: %s", body)
	}
	if v, _ := s.Session(id); v.State != juiceapi.StateClosed {
		t.Fatalf("session of a missing agent: %s", v.State)
	}
	// Configured agents never time out.
	if v := s.Agents("test"); v[0].State != juiceapi.AgentActive {
		t.Fatalf("configured agent: %s", v[0].State)
	}

	code, _, body = r.do("PUT", "/admin/agents/test-agent-1", testToken, `{"state":"missing"}`)
	if code != 200 || !strings.Contains(body, `"state":"missing"`) {
		t.Errorf("admin agent: %d %s", code, body)
	}
	if code, _, _ := r.do("PUT", "/admin/agents/nope", testToken, `{"state":"missing"}`); code != 404 {
		t.Errorf("admin unknown agent: %d", code)
	}
	if code, _, _ := r.do("PUT", "/admin/agents/test-agent-1", testToken, `{"state":"gone"}`); code != 400 {
		t.Errorf("admin bad state: %d", code)
	}
	if code, _, body := r.do("GET", "/admin/check", testToken, ""); code != 200 {
		t.Errorf("check: %d %s", code, body)
	}
}

func TestAdminFaults(t *testing.T) {
	r, s := startRaw(t, Config{Pools: []PoolConfig{UniformPool("test", 1, 1, 80*G)}, Seed: 1})
	code, _, body := r.do("PUT", "/admin/faults", testToken, `{"errorRate":1,"latency":"5ms"}`)
	if code != 200 || !strings.Contains(body, `"latency":"5ms"`) || s.Faults().ErrorRate != 1 {
		t.Fatalf("put faults: %d %s", code, body)
	}
	code, ct, body := r.do("GET", "/v1/status", testToken, "")
	if code != 500 || !strings.HasPrefix(ct, "text/plain") || body != faultErrorMsg {
		t.Errorf("error fault: %d %q", code, body)
	}
	// Admin, metrics and health are never faulted, so faults can always be turned off.
	if code, _, _ := r.do("GET", "/admin/faults", testToken, ""); code != 200 {
		t.Errorf("admin faulted: %d", code)
	}
	if code, _, _ := r.do("PUT", "/admin/faults", testToken, `{"errorRate":0.7,"dropRate":0.5}`); code != 400 {
		t.Errorf("rates above 1 accepted: %d", code)
	}
	if code, _, _ := r.do("PUT", "/admin/faults", testToken, `{}`); code != 200 {
		t.Errorf("clear: %d", code)
	}
	if code, _, _ := r.do("GET", "/v1/status", testToken, ""); code != 200 {
		t.Errorf("after clearing: %d", code)
	}
	_, _, metrics := r.do("GET", "/metrics", "", "")
	if !strings.Contains(metrics, `juice_sim_faults_injected_total{kind="error"} 1`) {
		t.Errorf("fault metric missing:\n%s", metrics)
	}
}

func TestConnectionFaults(t *testing.T) {
	r, s := startRaw(t, Config{Pools: []PoolConfig{UniformPool("test", 1, 1, 80*G)}, Seed: 1})
	hc := &http.Client{Timeout: 300 * time.Millisecond}
	send := func(method, path, body string) error {
		req, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Idempotency-Key", "lost-1")
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	_ = s.SetFaults(Faults{DropRate: 1})
	if err := send("GET", "/v1/status", ""); err == nil || !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
		t.Errorf("drop: want EOF, got %v", err)
	}

	_ = s.SetFaults(Faults{HangRate: 1})
	start := time.Now()
	if err := send("GET", "/v1/status", ""); err == nil || time.Since(start) < 250*time.Millisecond {
		t.Errorf("hang: %v after %v", err, time.Since(start))
	}

	// A lost response: the session is booked although the client saw only a dropped connection.
	_ = s.SetFaults(Faults{LostResponseRate: 1})
	if err := send("POST", "/v1/request/session", `{"poolId":"test","gpus":[{}]}`); err == nil {
		t.Errorf("lost response: no error")
	}
	_ = s.SetFaults(Faults{})
	if ss := s.Sessions(); len(ss) != 1 || ss[0].IdempotencyKey != "lost-1" {
		t.Fatalf("lost response did not book: %+v", ss)
	}

	_ = s.SetFaults(Faults{Latency: 100 * time.Millisecond})
	start = time.Now()
	if err := send("GET", "/v1/status", ""); err != nil || time.Since(start) < 100*time.Millisecond {
		t.Errorf("latency: %v after %v", err, time.Since(start))
	}
}

func TestStartServerAndShutdown(t *testing.T) {
	srv, err := StartServer(Config{Pools: []PoolConfig{UniformPool("test", 1, 1, G)}, Tick: 10 * time.Millisecond,
		Faults: Faults{HangRate: 1}}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	// A hung request must not hold up shutdown.
	go func() { _, _ = http.Get(srv.URL + "/v1/status") }()
	time.Sleep(50 * time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- srv.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs")
	}
	if err := srv.Wait(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.json")
	text := `{"tick": "500ms", "activateDelay": "2s", "faults": {"errorRate": 0.1, "latency": "10ms"},
	  "pools": [{"id": "test", "agents": [{"count": 4, "gpus": 8, "vram": "80GiB"}]},
	            {"id": "demo", "agents": [{"id": "l4-1", "gpus": 2, "vram": "24", "labels": {"gpu": "l4"}, "taints": {"x": "y"}}]}]}`
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := LoadConfigFile(path, &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Tick != 500*time.Millisecond || cfg.ActivateDelay != 2*time.Second || cfg.Faults.ErrorRate != 0.1 || cfg.Faults.Latency != 10*time.Millisecond {
		t.Errorf("timing/faults: %+v", cfg)
	}
	if len(cfg.Pools) != 2 || len(cfg.Pools[0].Agents) != 4 || len(cfg.Pools[0].Agents[3].GPUs) != 8 ||
		cfg.Pools[0].Agents[0].GPUs[0].VRAM != 80*G || cfg.Pools[1].Agents[0].ID != "l4-1" ||
		cfg.Pools[1].Agents[0].GPUs[1].VRAM != 24*G || cfg.Pools[1].Agents[0].Labels["gpu"] != "l4" {
		t.Errorf("pools: %+v", cfg.Pools)
	}

	for _, bad := range []struct{ text, want string }{
		{`{"pools": [{"id": "a", "agents": [{"gpus": 1, "vram": "1.5xyz"}]}]}`, `invalid VRAM size "1.5xyz"`},
		{`{"pools": [{"id": "a", "agents": [{"gpus": 0, "vram": "1"}]}]}`, "gpus 0"},
		{`{"pools": []}`, "no pools"},
		{`{"tick": 5, "pools": [{"id": "a"}]}`, `want a string such as "1s"`},
		{`{"pool": []}`, `unknown field "pool"`},
		{`{"pools": [{"id": "a", "agents": [{"count": 2, "id": "x", "gpus": 1, "vram": "1"}]}]}`, "need count 1"},
	} {
		if err := os.WriteFile(path, []byte(bad.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var c Config
		err := LoadConfigFile(path, &c)
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: got %v, want %q and the path", bad.text, err, bad.want)
		}
	}

	for _, bad := range []struct {
		cfg  Config
		want string
	}{
		{Config{Pools: []PoolConfig{UniformPool("a", 1, 1, G), UniformPool("a", 1, 1, G)}}, `pool "a" is defined twice`},
		{Config{Pools: []PoolConfig{UniformPool("a", 1, 0, G)}}, "has no GPUs"},
		{Config{Faults: Faults{ErrorRate: 2}}, "error rate 2"},
		{Config{Tick: -1}, "tick -1ns is negative"},
	} {
		if err := bad.cfg.Validate(); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Validate: got %v, want %q", err, bad.want)
		}
	}
}

func TestMetricsValues(t *testing.T) {
	r, s := startRaw(t, Config{Pools: []PoolConfig{UniformPool("test", 2, 2, 80*G)}})
	_, _ = s.Request("", reqOf("test", 1, 10*G))
	_, _ = s.Request("", reqOf("test", 2, 0))
	id, _ := s.Request("", reqOf("test", 1, 0))
	_ = s.Cancel(id)
	_, _, body := r.do("GET", "/metrics", "", "")
	want := map[string]string{
		`juice_sim_sessions{pool="test",state="active"}`: "2",
		`juice_sim_sessions{pool="test",state="closed"}`: "1",
		`juice_sim_gpus{pool="test"}`:                    "4",
		`juice_sim_gpus_allocated{pool="test"}`:          "3",
		`juice_sim_vram_allocated_bytes{pool="test"}`:    "1.8253611008e+11", // 170 GiB
		`juice_sim_agents{pool="test",state="active"}`:   "2",
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, value, _ := strings.Cut(sc.Text(), " ")
		if w, ok := want[name]; ok {
			if value != w {
				t.Errorf("%s = %s, want %s", name, value, w)
			}
			delete(want, name)
		}
	}
	for name := range want {
		t.Errorf("metric %s missing", name)
	}
}
