package contract_test

import (
	"testing"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/contract"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/test/world"
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
			w := world.New(t, world.Config{NoDatabase: true, PoolIDs: legacy.PoolUUIDs,
				Sim: &juicesim.Config{Legacy: legacy,
					Tick: 20 * time.Millisecond, ActivateDelay: 20 * time.Millisecond, CancelDelay: 20 * time.Millisecond,
					Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 2, 4, 24*vram.GiB)}},
				Client: func(hc *juiceapi.HTTPConfig) { hc.MaxAttempts, hc.InitialBackoff = 3, 10*time.Millisecond }})
			srv, c := w.Sim, w.Juice
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
