package juicesim

// Wire types that only the simulator serves: the agent and pool management parts of the legacy REST model, which
// juice-slurm's client never calls.

// AgentUpdate is the body of PUT /v1/agent/{id}: an agent's heartbeat and state change.
type AgentUpdate struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// Pool is a group of shared GPUs (wire JSON of /v1/pool).
type Pool struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	SessionCount int    `json:"sessionCount"`
	AgentCount   int    `json:"agentCount"`
	UserCount    int    `json:"userCount"`
}

// CreatePoolParams is the body of PUT /v1/pool.
type CreatePoolParams struct {
	Name string `json:"name"`
}
