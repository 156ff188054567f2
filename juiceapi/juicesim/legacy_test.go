package juicesim

import (
	"testing"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// Each Legacy behaviour, switched on alone, does what the legacy controller was seen to do
// (test/juicelegacy/README.md), and nothing when off.
func TestLegacyBehaviours(t *testing.T) {
	const G = 1 << 30
	pools := []PoolConfig{UniformPool("test", 2, 4, 24*G)}
	whole := func(n int) juiceapi.SessionRequirements {
		return juiceapi.SessionRequirements{PoolID: "test", GPUs: make([]juiceapi.GPURequirements, n)}
	}
	t.Run("IgnoreIdempotencyKey", func(t *testing.T) {
		for _, on := range []bool{false, true} {
			s := newSim(t, Config{Pools: pools, Legacy: Legacy{IgnoreIdempotencyKey: on}})
			a, _ := s.Request("k", whole(1))
			b, _ := s.Request("k", whole(1))
			if (a != b) != on {
				t.Fatalf("on=%v: same key gave %s then %s", on, a, b)
			}
			if got, _ := s.Session(a); (got.IdempotencyKey == "") != on {
				t.Fatalf("on=%v: key on the wire %q", on, got.IdempotencyKey)
			}
		}
	})
	t.Run("NoSessionListing", func(t *testing.T) {
		s := newSim(t, Config{Pools: pools, Legacy: Legacy{NoSessionListing: true}})
		if _, err := s.Request("", whole(1)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range s.Agents("test") {
			n += len(a.Sessions)
		}
		if n != 0 {
			t.Fatalf("the listing shows %d sessions", n)
		}
		if err := s.SetAgentState("test-agent-2", juiceapi.AgentMissing); err != nil {
			t.Fatal(err)
		}
		if got := len(s.Agents("test")); got != 1 {
			t.Fatalf("%d agents listed, want the active one", got)
		}
	})
	t.Run("CancelReopens", func(t *testing.T) {
		s := newSim(t, Config{Pools: pools, Legacy: Legacy{CancelReopens: true}})
		id, _ := s.Request("", whole(1))
		_ = s.Cancel(id)
		_ = s.Cancel(id)
		if got, _ := s.Session(id); got.State != juiceapi.StateCanceling || s.Reopened() != 1 || s.Check() == nil {
			t.Fatalf("state %s, reopened %d", got.State, s.Reopened())
		}
	})
	t.Run("EmptyQueuedRead and WholeAgentGrant", func(t *testing.T) {
		s := newSim(t, Config{Pools: pools, Legacy: Legacy{EmptyQueuedRead: true, WholeAgentGrant: true}})
		id, _ := s.Request("", whole(1))
		got, _ := s.Session(id)
		if len(got.GPUs) != 4 || got.GPUs[0].Index != 3 {
			t.Fatalf("a 1-GPU request got %v, want all 4 in reverse order", got.GPUs)
		}
		slice := juiceapi.SessionRequirements{PoolID: "test", GPUs: []juiceapi.GPURequirements{{VRAMRequired: 25 * G}}}
		s2 := newSim(t, Config{Pools: pools, Legacy: Legacy{EmptyQueuedRead: true, CrashOnNeverFit: true}, Tick: 1 << 40})
		q, _ := s2.Request("", slice)
		if got, _ := s2.Session(q); got.ID != "" || got.State != "" || got.GPUs != nil {
			t.Fatalf("queued read %+v, want the zero session", got)
		}
	})
	t.Run("CrashOnNeverFit", func(t *testing.T) {
		s := newSim(t, Config{Pools: pools, Legacy: Legacy{CrashOnNeverFit: true}})
		if _, err := s.Request("", whole(5)); err != nil {
			t.Fatalf("accepted, then the crash: %v", err)
		}
		if crashed, why := s.Crashed(); !crashed || why != "unable to find a matching set of GPUs" {
			t.Fatalf("crashed %v %q", crashed, why)
		}
	})
	t.Run("PoolUUIDs", func(t *testing.T) {
		s := newSim(t, Config{Pools: pools, Legacy: Legacy{PoolUUIDs: true}})
		id, ok := s.PoolID("test")
		if _, err := uuid.Parse(id); !ok || err != nil {
			t.Fatalf("pool id %q", id)
		}
		phantom, err := s.Request("", whole(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Session(phantom); err == nil {
			t.Fatal("a request by name was stored")
		}
		req := whole(1)
		req.PoolID = id
		real, _ := s.Request("", req)
		if got, _ := s.Session(real); got.State != juiceapi.StateActive {
			t.Fatalf("by id: %s", got.State)
		}
	})
	t.Run("MissingKeepsSessions", func(t *testing.T) {
		s := newSim(t, Config{Pools: pools, Legacy: Legacy{MissingKeepsSessions: true}})
		id, _ := s.Request("", whole(1))
		_ = s.SetAgentState("test-agent-1", juiceapi.AgentMissing)
		if got, _ := s.Session(id); got.State != juiceapi.StateActive {
			t.Fatalf("state %s, want still active", got.State)
		}
	})
}
