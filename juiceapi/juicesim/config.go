package juicesim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// Config describes the simulated controller: its pools and agents, its timing and its faults.
//
// The zero timing is "instant" mode for tests: with Tick == 0 the scheduler runs on every API
// request, and zero delays move a session from queued to active within the POST that created it.
// DefaultTiming gives the legacy controller's one-second tick.
type Config struct {
	Pools []PoolConfig

	// Tick is how often the scheduler runs (legacy: 1s). 0 = on every API request.
	Tick time.Duration
	// AssignDelay is the least time a session stays queued before the scheduler may assign it.
	AssignDelay time.Duration
	// ActivateDelay is the time from assigned to active (the agent starting the session).
	ActivateDelay time.Duration
	// CancelDelay is the time from canceling to closed (the agent tearing the session down).
	CancelDelay time.Duration
	// AgentTimeout marks an agent registered through /v1/register/agent as missing when it sent no
	// PUT /v1/agent/{id} for this long (legacy: 30s). 0 = never. Configured agents never time out.
	AgentTimeout time.Duration

	// Token is the M2M token every request must carry as "Authorization: Bearer <token>" (admin
	// endpoints included). Empty disables authentication (tests and demos only).
	Token string

	// Legacy switches on behaviours of the legacy open-source controller (all of them: Profile("legacy")).
	Legacy Legacy

	// Faults are injected into /v1 requests; change them at run time with Sim.SetFaults or
	// PUT /admin/faults.
	Faults Faults
	// Seed seeds the fault dice, so a test with faults is repeatable. 0 = random.
	Seed uint64

	// Listen is the address StartServer listens on. Default "127.0.0.1:0" (a free port).
	Listen string
	// Hostname is reported by GET /v1/status. Default "juice-sim".
	Hostname string
	// Now is the clock. Default time.Now; tests may pass a fake one and call Sim.Step.
	Now func() time.Time
}

// DefaultTiming returns the legacy controller's timing: a one-second tick, a second to activate
// and to cancel, and missing agents after 30 s.
func DefaultTiming() (tick, assign, activate, cancel, agentTimeout time.Duration) {
	return time.Second, 0, time.Second, time.Second, 30 * time.Second
}

// PoolConfig is one pool; its ID is the name users type (--juice-pool=test).
type PoolConfig struct {
	ID     string        `json:"id"`
	Agents []AgentConfig `json:"agents"`
}

// AgentConfig is one simulated GPU host. Empty ID, Hostname and Address are generated.
type AgentConfig struct {
	ID       string            `json:"id,omitempty"`
	Hostname string            `json:"hostname,omitempty"`
	Address  string            `json:"address,omitempty"`
	GPUs     []GPUConfig       `json:"gpus"`
	Labels   map[string]string `json:"labels,omitempty"`
	Taints   map[string]string `json:"taints,omitempty"`
	// State is the agent's starting state: active (default), disabled or missing.
	State string `json:"state,omitempty"`
}

// GPUConfig is one GPU of an agent.
type GPUConfig struct {
	Name string `json:"name,omitempty"`
	VRAM uint64 `json:"vram"` // bytes
}

// UniformPool builds a pool of agents identical agents with gpus GPUs of vram bytes each.
func UniformPool(id string, agents, gpus int, vram uint64) PoolConfig {
	p := PoolConfig{ID: id}
	for range agents {
		p.Agents = append(p.Agents, UniformAgent(gpus, vram))
	}
	return p
}

// UniformAgent builds one agent with gpus GPUs of each bytes of VRAM.
func UniformAgent(gpus int, each uint64) AgentConfig {
	a := AgentConfig{}
	for range gpus {
		a.GPUs = append(a.GPUs, GPUConfig{Name: "Simulated GPU " + vram.Format(each), VRAM: each})
	}
	return a
}

// Validate reports the first problem with the configuration.
func (c Config) Validate() error {
	pools := map[string]bool{}
	agents := map[string]bool{}
	for _, p := range c.Pools {
		if p.ID == "" {
			return errors.New("a pool has no id")
		}
		if pools[p.ID] {
			return fmt.Errorf("pool %q is defined twice", p.ID)
		}
		pools[p.ID] = true
		for i, a := range p.Agents {
			id := a.ID
			if id == "" {
				id = defaultAgentID(p.ID, i)
			}
			if agents[id] {
				return fmt.Errorf("pool %q: agent %q is defined twice", p.ID, id)
			}
			agents[id] = true
			if len(a.GPUs) == 0 {
				return fmt.Errorf("pool %q: agent %q has no GPUs", p.ID, id)
			}
			for j, g := range a.GPUs {
				if g.VRAM == 0 {
					return fmt.Errorf("pool %q: agent %q: GPU %d has no VRAM", p.ID, id, j)
				}
			}
			switch a.State {
			case "", juiceapi.AgentActive, juiceapi.AgentDisabled, juiceapi.AgentMissing:
			default:
				return fmt.Errorf("pool %q: agent %q: state %q: want active, disabled or missing", p.ID, id, a.State)
			}
		}
	}
	for name, d := range map[string]time.Duration{"tick": c.Tick, "assign delay": c.AssignDelay,
		"activate delay": c.ActivateDelay, "cancel delay": c.CancelDelay, "agent timeout": c.AgentTimeout} {
		if d < 0 {
			return fmt.Errorf("%s %v is negative", name, d)
		}
	}
	return c.Faults.Validate()
}

func defaultAgentID(pool string, i int) string { return fmt.Sprintf("%s-agent-%d", pool, i+1) }

// FileConfig is the JSON config file of juice-sim: sizes as VRAM strings ("80GiB"), durations as
// Go durations ("1s"). Example:
//
//	{"tick": "1s", "activateDelay": "2s",
//	 "pools": [{"id": "test", "agents": [{"count": 4, "gpus": 8, "vram": "80GiB"}]},
//	           {"id": "demo", "agents": [{"gpus": 2, "vram": "24GiB", "labels": {"gpu": "l4"}}]}]}
type FileConfig struct {
	Tick          *Duration `json:"tick,omitempty"`
	AssignDelay   *Duration `json:"assignDelay,omitempty"`
	ActivateDelay *Duration `json:"activateDelay,omitempty"`
	CancelDelay   *Duration `json:"cancelDelay,omitempty"`
	AgentTimeout  *Duration `json:"agentTimeout,omitempty"`
	Faults        *Faults   `json:"faults,omitempty"`
	// Profile "legacy" switches every Legacy behaviour on; Legacy then switches single ones.
	Profile string           `json:"profile,omitempty"`
	Legacy  *Legacy          `json:"legacy,omitempty"`
	Pools   []FilePoolConfig `json:"pools"`
}

// FilePoolConfig is a pool in the config file.
type FilePoolConfig struct {
	ID     string            `json:"id"`
	Agents []FileAgentConfig `json:"agents"`
}

// FileAgentConfig is Count agents (default 1) of GPUs GPUs with VRAM each.
type FileAgentConfig struct {
	Count    int               `json:"count,omitempty"`
	ID       string            `json:"id,omitempty"` // only with count 1
	Hostname string            `json:"hostname,omitempty"`
	Address  string            `json:"address,omitempty"`
	GPUs     int               `json:"gpus"`
	VRAM     string            `json:"vram"`
	GPUName  string            `json:"gpuName,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Taints   map[string]string `json:"taints,omitempty"`
	State    string            `json:"state,omitempty"`
}

// Duration is a time.Duration written as "1.5s" in JSON.
type Duration time.Duration

func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"1s\" or \"250ms\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// LoadConfigFile reads a JSON config file into cfg, overriding what the file sets.
func LoadConfigFile(path string, cfg *Config) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var fc FileConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&fc); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if err := fc.apply(cfg); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	return nil
}

func (fc FileConfig) apply(cfg *Config) error {
	set := func(dst *time.Duration, src *Duration) {
		if src != nil {
			*dst = time.Duration(*src)
		}
	}
	set(&cfg.Tick, fc.Tick)
	set(&cfg.AssignDelay, fc.AssignDelay)
	set(&cfg.ActivateDelay, fc.ActivateDelay)
	set(&cfg.CancelDelay, fc.CancelDelay)
	set(&cfg.AgentTimeout, fc.AgentTimeout)
	if fc.Faults != nil {
		cfg.Faults = *fc.Faults
	}
	if fc.Profile != "" {
		l, err := Profile(fc.Profile)
		if err != nil {
			return err
		}
		cfg.Legacy = l
	}
	if fc.Legacy != nil {
		cfg.Legacy = *fc.Legacy
	}
	if len(fc.Pools) == 0 {
		return errors.New("no pools")
	}
	cfg.Pools = nil
	for _, fp := range fc.Pools {
		p := PoolConfig{ID: fp.ID}
		for i, fa := range fp.Agents {
			count := fa.Count
			if count == 0 {
				count = 1
			}
			if count > 1 && (fa.ID != "" || fa.Hostname != "" || fa.Address != "") {
				return fmt.Errorf("pool %q agents[%d]: id, hostname and address need count 1", fp.ID, i)
			}
			if fa.GPUs < 1 {
				return fmt.Errorf("pool %q agents[%d]: gpus %d: want at least 1", fp.ID, i, fa.GPUs)
			}
			vram, err := vram.Parse(fa.VRAM)
			if err != nil {
				return fmt.Errorf("pool %q agents[%d]: %w", fp.ID, i, err)
			}
			for range count {
				a := UniformAgent(fa.GPUs, vram)
				if fa.GPUName != "" {
					for j := range a.GPUs {
						a.GPUs[j].Name = fa.GPUName
					}
				}
				a.ID, a.Hostname, a.Address = fa.ID, fa.Hostname, fa.Address
				a.Labels, a.Taints, a.State = fa.Labels, fa.Taints, fa.State
				p.Agents = append(p.Agents, a)
			}
		}
		cfg.Pools = append(cfg.Pools, p)
	}
	return nil
}
