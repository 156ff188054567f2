package juiceapi_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

const (
	testToken = "m2m_TESTTOKEN_4f1c9a_do_not_leak"
	G         = vram.GiB
)

// fakeClock is a settable clock for juicesim.Config.Now.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type env struct {
	srv       *juicesim.Server
	sim       *juicesim.Sim
	client    *juiceapi.HTTPClient
	tokenPath string
}

// writeToken writes a token file with the given mode.
func writeToken(t testing.TB, dir, token string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	return path
}

// start runs the simulator on a real listener and a client pointed at it. Tests that need other
// client settings pass mod; the defaults here keep the backoff short.
func start(t testing.TB, cfg juicesim.Config, mod func(*juiceapi.HTTPConfig)) *env {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.Pools == nil {
		cfg.Pools = []juicesim.PoolConfig{juicesim.UniformPool("test", 4, 8, 80*G)}
	}
	srv, err := juicesim.StartServer(cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	hc := juiceapi.HTTPConfig{
		BaseURL:        srv.URL,
		TokenFile:      writeToken(t, t.TempDir(), testToken, 0o600),
		Timeout:        2 * time.Second,
		MaxAttempts:    4,
		InitialBackoff: 5 * time.Millisecond,
		MaxBackoff:     20 * time.Millisecond,
	}
	if mod != nil {
		mod(&hc)
	}
	c, err := juiceapi.NewHTTPClient(hc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, sim: srv.Sim, client: c, tokenPath: hc.TokenFile}
}

// requests counts the simulator's answered requests on a route, any status.
func requests(t testing.TB, sim *juicesim.Sim, route string) int {
	t.Helper()
	mfs, err := sim.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "juice_sim_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return int(n)
}

func nilLog() logr.Logger { return logr.Discard() }
