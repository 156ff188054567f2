//go:build legacy

package juicelegacy_test

import (
	"testing"
	"time"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/contract"
)

// TestContractLegacy runs the juiceapi contract suite (the same one juice-sim passes, juiceapi/contract) through
// juice-slurm's own client against the legacy controller: pools mapped by name to their UUIDs, as
// --juice-pools does.
func TestContractLegacy(t *testing.T) {
	e := requireLegacy(t)
	c, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: e.Get("JUICE_LEGACY_URL"),
		TokenFile: e.Get("JUICE_LEGACY_TOKEN_FILE"), Pools: e.pools, MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.requireAgentsRunning(t, "emu-test")
	contract.Run(t, contract.Target{Client: c, Pool: "test", Within: 20 * time.Second, Poll: 100 * time.Millisecond})
	e.controllerAlive(t)
	e.requireAgentsRunning(t, "emu-test") // no cancel of a session they do not hold, no oversized answer
}
