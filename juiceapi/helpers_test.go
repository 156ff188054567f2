package juiceapi_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/test/world"
)

const (
	testToken = "m2m_TESTTOKEN_4f1c9a_do_not_leak"
	G         = vram.GiB
)

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

// start runs the simulator on a real listener and a client pointed at it (test/world, without a database).
// Tests that need other client settings pass mod; the defaults here keep the backoff short.
func start(t testing.TB, cfg juicesim.Config, mod func(*juiceapi.HTTPConfig)) *env {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.Pools == nil {
		cfg.Pools = []juicesim.PoolConfig{juicesim.UniformPool("test", 4, 8, 80*G)}
	}
	w := world.New(t, world.Config{NoDatabase: true, Sim: &cfg, Token: testToken, Client: func(hc *juiceapi.HTTPConfig) {
		hc.Timeout, hc.MaxAttempts = 2*time.Second, 4
		hc.InitialBackoff, hc.MaxBackoff = 5*time.Millisecond, 20*time.Millisecond
		if mod != nil {
			mod(hc)
		}
	}})
	return &env{srv: w.Sim, sim: w.Sim.Sim, client: w.Juice, tokenPath: w.TokenFile}
}

// requests counts the simulator's answered requests on a route, any status.
func requests(t testing.TB, sim *juicesim.Sim, route string) int {
	t.Helper()
	return world.SimCalls(t, sim, route)
}

func nilLog() logr.Logger { return logr.Discard() }
