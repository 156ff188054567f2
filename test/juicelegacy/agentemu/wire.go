package agentemu

// The JSON of the legacy controller's agent protocol, in our own structs. Field names are those of the legacy
// pkg/restapi exactly (note "State" with a capital S in a session update: that is what the real agent sends).

// GPU is one GPU as an agent registers it (restapi.Gpu).
type GPU struct {
	Index       int        `json:"index"`
	UUID        string     `json:"uuid"`
	Name        string     `json:"name"`
	Vendor      string     `json:"vendor"`
	Model       string     `json:"model"`
	VendorID    uint32     `json:"vendorId"`
	DeviceID    uint32     `json:"deviceId"`
	SubDeviceID uint32     `json:"subDeviceId"`
	Driver      string     `json:"driver"`
	VRAM        uint64     `json:"vram"`
	PCIBus      string     `json:"pciBus"`
	Metrics     GPUMetrics `json:"metrics"`
}

// GPUMetrics is what an agent reports per GPU on every update (restapi.GpuMetrics).
type GPUMetrics struct {
	ClockCore       uint32 `json:"clockCore"`
	ClockMemory     uint32 `json:"clockMemory"`
	UtilizationGPU  uint32 `json:"utilizationGpu"`
	UtilizationVRAM uint32 `json:"utilizationVram"`
	TemperatureGPU  uint32 `json:"temperatureGpu"`
	VRAMUsed        uint64 `json:"vramUsed"`
	PowerDraw       uint32 `json:"powerDraw"`
	PowerLimit      uint32 `json:"powerLimit"`
	FanSpeed        uint32 `json:"fanSpeed"`
}

// SessionGPU is one GPU of a session: the agent's GPU index and the VRAM taken on it (restapi.SessionGpu).
type SessionGPU struct {
	Index        int    `json:"index"`
	VRAMRequired uint64 `json:"vramRequired"`
}

// Connection is a client process of a session (restapi.Connection, with restapi.ConnectionData inlined).
type Connection struct {
	ID          string `json:"id"`
	PID         string `json:"pid"`
	ProcessName string `json:"processName"`
	ExitCode    int    `json:"exitCode"`
}

// Session is a session as the controller lists it in GET /v1/agent/{id} (restapi.Session).
type Session struct {
	ID          string       `json:"id"`
	State       string       `json:"state"`
	Address     string       `json:"address"`
	Version     string       `json:"version"`
	PoolID      string       `json:"poolId"`
	GPUs        []SessionGPU `json:"gpus"`
	Connections []Connection `json:"connections"`
}

// AgentInfo is the body of POST /v1/register/agent and of GET /v1/agent/{id} (restapi.Agent).
type AgentInfo struct {
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

// SessionUpdate is one session's new state in an agent update (restapi.SessionUpdate).
type SessionUpdate struct {
	State       string                `json:"State"`
	Connections map[string]Connection `json:"connections"`
}

// AgentUpdate is the body of PUT /v1/agent/{id} (restapi.AgentUpdate).
type AgentUpdate struct {
	ID       string                   `json:"id"`
	State    string                   `json:"state"`
	Sessions map[string]SessionUpdate `json:"sessions"`
	GPUs     []GPUMetrics             `json:"gpus"`
}

// Session and agent states of the protocol.
const (
	SessionQueued    = "queued"
	SessionAssigned  = "assigned"
	SessionActive    = "active"
	SessionCanceling = "canceling"
	SessionClosed    = "closed"

	AgentActive = "active"
	AgentClosed = "closed"
)
