package juicesim

import (
	"fmt"

	"github.com/google/uuid"
)

// Legacy switches on, one by one, the behaviours of the 2023 open-source controller that the kind default
// simulator does not have (facts: ../shared/notes/juice-legacy.md, test/juicelegacy/README.md). Each one is
// what a real controller did to juice-slurm; a unit test switches it on to prove the client survives it
// without building the legacy controller. ProfileLegacy turns them all on.
type Legacy struct {
	// IgnoreIdempotencyKey: the Idempotency-Key header is ignored (a retried POST books a second session) and
	// sessions carry no idempotencyKey field.
	IgnoreIdempotencyKey bool `json:"ignoreIdempotencyKey,omitempty"`
	// NoSessionListing: GET /v1/agents lists active agents only, at most 20, each with "sessions": []; only
	// GET /v1/agent/{id} shows an agent's sessions.
	NoSessionListing bool `json:"noSessionListing,omitempty"`
	// CancelReopens: DELETE of a closed session reopens it as canceling, and it stays so for ever (the real
	// agent exits on it).
	CancelReopens bool `json:"cancelReopens,omitempty"`
	// EmptyQueuedRead: a queued session reads back with "id":"", "state":"" and "gpus":null (also after it
	// was cancelled while queued).
	EmptyQueuedRead bool `json:"emptyQueuedRead,omitempty"`
	// WholeAgentGrant: a whole-GPU request is given every GPU of the agent (listed in reverse order, as the
	// legacy map order may be), takes none of them, and sessions stack on one agent.
	WholeAgentGrant bool `json:"wholeAgentGrant,omitempty"`
	// CrashOnNeverFit: a request that no active agent of its pool can ever fit (or for no GPU) is accepted;
	// at the next scheduler pass the controller exits: every later request has its connection dropped.
	CrashOnNeverFit bool `json:"crashOnNeverFit,omitempty"`
	// PoolUUIDs: pools are known by a UUID (Sim.PoolID gives it); a name or an unknown id as poolId is
	// answered with a phantom session id that is never stored; there is no GET /v1/pools.
	PoolUUIDs bool `json:"poolUUIDs,omitempty"`
	// MissingKeepsSessions: the sessions of an agent that goes missing stay active for ever.
	MissingKeepsSessions bool `json:"missingKeepsSessions,omitempty"`
	// CancelBeforeActiveKillsAgent: a DELETE of an assigned session (its agent has not taken it yet) makes it
	// canceling; the agent then meets a cancel of a session it does not hold and exits: it goes missing.
	CancelBeforeActiveKillsAgent bool `json:"cancelBeforeActiveKillsAgent,omitempty"`
}

// ProfileLegacy is the name of the profile with every Legacy behaviour on (juice-sim --profile legacy).
const ProfileLegacy = "legacy"

// AllLegacy returns Legacy with every behaviour on.
func AllLegacy() Legacy {
	return Legacy{IgnoreIdempotencyKey: true, NoSessionListing: true, CancelReopens: true, EmptyQueuedRead: true,
		WholeAgentGrant: true, CrashOnNeverFit: true, PoolUUIDs: true, MissingKeepsSessions: true,
		CancelBeforeActiveKillsAgent: true}
}

// Profile returns the Legacy behaviours of a named profile: "" or "default" (none) or "legacy" (all).
func Profile(name string) (Legacy, error) {
	switch name {
	case "", "default":
		return Legacy{}, nil
	case ProfileLegacy:
		return AllLegacy(), nil
	}
	return Legacy{}, fmt.Errorf("profile %q: want default or legacy", name)
}

// legacyPoolNamespace derives a pool's UUID from its name, so a test (and a person reading logs) sees the
// same id for the same name in every run.
var legacyPoolNamespace = uuid.MustParse("6f1d6c1e-4c5b-4a53-9f0e-6a756963652d")

// PoolID returns the id the controller knows a pool by: its name, or with PoolUUIDs its UUID. ok is false
// for an unknown pool.
func (s *Sim) PoolID(name string) (id string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.poolIDLocked(name)
}

// poolIDLocked is PoolID under s.mu.
func (s *Sim) poolIDLocked(name string) (id string, ok bool) {
	for _, pid := range s.poolOrder {
		if s.pools[pid].name == name {
			return pid, true
		}
	}
	return "", false
}

// Crashed reports whether the simulated controller exited (CrashOnNeverFit), and why.
func (s *Sim) Crashed() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed != "", s.crashed
}

// AgentsKilled counts agents that exited on a cancel of a session they had not taken
// (CancelBeforeActiveKillsAgent).
func (s *Sim) AgentsKilled() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.agentsKilled
}

// Reopened counts cancels of closed sessions that reopened them (CancelReopens): each one would have killed a
// real agent.
func (s *Sim) Reopened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reopened
}
