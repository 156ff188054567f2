package juiceapi

import (
	"context"

	"github.com/google/uuid"
)

// Client is what the reconciler uses to talk to the Juice Controller. It hides the wire layer: the
// HTTP implementation follows the public 2023 REST model, and can be replaced once the production
// API is known.
type Client interface {
	// RequestSession asks for a session. key is the reservation's UUID, sent as the HTTP header
	// "Idempotency-Key: <uuid>" on POST /v1/request/session and inside the version field (TaggedVersion).
	// A controller that honours the header answers a repeat with the same session; one that does not (the
	// legacy controller) books another, which the caller finds by key (WalkPool) and cancels. So the POST
	// is sent once: the caller, not the client, decides to ask again. req.PoolID is the pool's name.
	RequestSession(ctx context.Context, key uuid.UUID, req SessionRequest) (sessionID string, err error)
	// GetSession returns the session's current state. An unknown id is ErrNotFound.
	GetSession(ctx context.Context, id string) (*Session, error)
	// CancelSession releases a session that has not ended. It reads the session first and leaves one that
	// is canceling or closed alone: the legacy controller reopens a closed session it is asked to cancel.
	CancelSession(ctx context.Context, id string) error
	// ListAgents lists the agents of a pool (by name; all pools when empty). Their sessions may be left out
	// (the legacy controller does): GetAgent shows them.
	ListAgents(ctx context.Context, pool string) ([]Agent, error)
	// GetAgent returns one agent with its sessions. An unknown id is ErrNotFound.
	GetAgent(ctx context.Context, id string) (*Agent, error)
	// Status is the documented token check: it fails with ErrUnauthorized on a bad token.
	Status(ctx context.Context) (*Status, error)
}

// SessionRequest is what the reconciler asks for: GPUs on one agent of one pool.
type SessionRequest struct {
	PoolID string
	GPUs   int
	// VRAMPerGPU is the VRAM wanted on each GPU in bytes; 0 means a whole GPU.
	VRAMPerGPU  uint64
	MatchLabels map[string]string
	Tolerates   map[string]string
}

// Session states, as the controller reports them.
const (
	StateQueued    = "queued"
	StateAssigned  = "assigned"
	StateActive    = "active"
	StateCanceling = "canceling"
	StateClosed    = "closed"
)

// Agent states, as the controller reports them.
const (
	AgentActive   = "active"
	AgentDisabled = "disabled"
	AgentMissing  = "missing" // no heartbeat for 30 s; its sessions end
	AgentClosed   = "closed"
)

// Session is the controller's view of a session (wire JSON of GET /v1/session/{id}).
type Session struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Address string `json:"address"` // the agent's host:port, set at assignment
	Version string `json:"version"`
	PoolID  string `json:"poolId"`
	// GPUs is set at assignment: one entry per requirement, with the agent's GPU index and the VRAM
	// granted in bytes (a whole-GPU request shows the GPU's full VRAM).
	GPUs        []SessionGPU `json:"gpus"`
	Connections []Connection `json:"connections"`
	// IdempotencyKey is an extension of this project's simulator: the Idempotency-Key the session was
	// requested with, so a sweep can find sessions that carry our keys. The legacy controller does not
	// send it; code must treat it as optional.
	IdempotencyKey string `json:"idempotencyKey,omitempty"`
}

// Active reports whether the session is usable by a job.
func (s *Session) Active() bool { return s.State == StateActive }

// Ended reports whether the session holds (or will soon hold) no GPUs any more.
func (s *Session) Ended() bool { return s.State == StateCanceling || s.State == StateClosed }

// SessionGPU is one GPU of a session on its agent.
type SessionGPU struct {
	Index        int    `json:"index"`
	VRAMRequired uint64 `json:"vramRequired"`
}

// Connection is a client process attached to a session (reported by the agent).
type Connection struct {
	ID          string `json:"id"`
	PID         string `json:"pid"`
	ProcessName string `json:"processName"`
	ExitCode    int    `json:"exitCode"`
}

// SessionRequirements is the wire body of POST /v1/request/session.
type SessionRequirements struct {
	Version     string            `json:"version"`
	PoolID      string            `json:"poolId"`
	GPUs        []GPURequirements `json:"gpus"` // one element per GPU wanted
	MatchLabels map[string]string `json:"matchLabels"`
	Tolerates   map[string]string `json:"tolerates"`
}

// GPURequirements is one wanted GPU. VRAMRequired is in bytes; 0 means a whole GPU.
type GPURequirements struct {
	VRAMRequired uint64 `json:"vramRequired"`
	PCIBus       string `json:"pciBus"`
}

// Agent is one GPU host in one pool (wire JSON of GET /v1/agents and /v1/agent/{id}).
type Agent struct {
	ID       string            `json:"id"`
	State    string            `json:"state"`
	Hostname string            `json:"hostname"`
	Address  string            `json:"address"`
	Version  string            `json:"version"`
	PoolID   string            `json:"poolId"`
	GPUs     []GPU             `json:"gpus"`
	Labels   map[string]string `json:"labels"`
	Taints   map[string]string `json:"taints"`
	Sessions []Session         `json:"sessions"`
}

// GPU is one GPU of an agent. VRAM is in bytes.
type GPU struct {
	Index  int    `json:"index"`
	UUID   string `json:"uuid"`
	Name   string `json:"name"`
	Vendor string `json:"vendor"`
	Model  string `json:"model"`
	VRAM   uint64 `json:"vram"`
	PCIBus string `json:"pciBus"`
}

// Status is the answer of GET /v1/status.
type Status struct {
	State    string `json:"state"`
	Version  string `json:"version"`
	Hostname string `json:"hostname"`
}

// Requirements turns a request into the wire form: one GPU requirement per GPU wanted.
func (r SessionRequest) Requirements(version string) SessionRequirements {
	gpus := make([]GPURequirements, r.GPUs)
	for i := range gpus {
		gpus[i].VRAMRequired = r.VRAMPerGPU
	}
	return SessionRequirements{
		Version:     version,
		PoolID:      r.PoolID,
		GPUs:        gpus,
		MatchLabels: r.MatchLabels,
		Tolerates:   r.Tolerates,
	}
}
