package contract_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/contract"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

// The contract suite against juice-sim, kind and legacy, with the legacy controller's one-second timing scaled
// down. test/juicelegacy runs it against the legacy controller itself.
func TestContractJuiceSim(t *testing.T) {
	for _, profile := range []string{"default", juicesim.ProfileLegacy} {
		t.Run(profile, func(t *testing.T) {
			legacy, err := juicesim.Profile(profile)
			if err != nil {
				t.Fatal(err)
			}
			srv, err := juicesim.StartServer(juicesim.Config{Token: "m2m_contract", Legacy: legacy,
				Tick: 20 * time.Millisecond, ActivateDelay: 20 * time.Millisecond, CancelDelay: 20 * time.Millisecond,
				Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 2, 4, 24*vram.GiB)}}, logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			tok := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tok, []byte("m2m_contract\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := juiceapi.HTTPConfig{BaseURL: srv.URL, TokenFile: tok, MaxAttempts: 3, InitialBackoff: 10 * time.Millisecond}
			if legacy.PoolUUIDs {
				id, _ := srv.Sim.PoolID("test")
				cfg.Pools = map[string]string{"test": id}
			}
			c, err := juiceapi.NewHTTPClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			contract.Run(t, contract.Target{Client: c, Pool: "test", Within: 5 * time.Second, Poll: 10 * time.Millisecond})
			if crashed, why := srv.Sim.Crashed(); crashed {
				t.Fatalf("the simulated controller exited: %s", why)
			}
			if n := srv.Sim.Reopened(); n != 0 {
				t.Fatalf("%d closed sessions reopened", n)
			}
			if err := srv.Sim.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
