package agentemu

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Config is the emulator's configuration (a JSON file, or built from flags).
//
//	{"controller": "127.0.0.1:8480", "tokenFile": "/var/tmp/juice-testbed/legacy/agents.token",
//	 "admin": "127.0.0.1:8482", "pools": {"test": "5a0e...-uuid"},
//	 "agents": [{"name": "emu-test", "count": 2, "pool": "test", "gpus": 4, "vram": "24GiB"},
//	            {"name": "emu-loss", "pool": "test", "gpus": 2, "vram": "16GiB",
//	             "labels": {"role": "loss"}, "taints": {"dedicated": "loss"}}]}
type Config struct {
	// Controller is host:port, as the real agent's -controller: every request tries https:// first and, when
	// the server answers in plain HTTP, again over http:// (the legacy client's scheme probe). A URL with a
	// scheme is used as it is (no probe).
	Controller string `json:"controller"`
	// TokenFile holds the bearer token (a JWT). It is re-read when it changes; the real agent keeps the token it
	// started with.
	TokenFile string `json:"tokenFile"`
	// Admin is the loopback address of the admin API.
	Admin string `json:"admin"`
	// Interval between updates (the real agent: 1 s).
	Interval Duration `json:"interval"`
	// RequestTimeout bounds each HTTP request; 0 means none, as in the real agent (a hung controller hangs it).
	RequestTimeout Duration `json:"requestTimeout"`
	// ReadWholeBody reads response bodies fully. When false (the default) a body is read with one Read call into
	// a buffer of its Content-Length, as the legacy client does, and a short read is an error: the real agent
	// fails once GET /v1/agent/{id} passes about 4 KB.
	ReadWholeBody bool `json:"readWholeBody"`
	// KeepGoing makes an agent log and carry on where the real agent exits (a failed request, a bad answer, a
	// cancel of a session it does not hold). When false (the default) the agent stops talking, state "exited",
	// with the reason; the controller then marks it missing after 30 s.
	KeepGoing bool `json:"keepGoing"`
	// Version is the agent version reported (the real agent reports its build version, 0.0.0 unless set).
	Version string `json:"version"`
	// Pools maps pool names to the controller's pool UUIDs; an agent's pool is a name from here or a UUID.
	Pools map[string]string `json:"pools"`
	// BasePort numbers the addresses agents report when they name none: 127.0.0.1:BasePort+i.
	BasePort int           `json:"basePort"`
	Agents   []AgentConfig `json:"agents"`
}

// AgentConfig describes one agent, or Count alike.
type AgentConfig struct {
	Name     string            `json:"name"`  // unique; with Count > 1 the agents are NAME-1, NAME-2, ...
	Count    int               `json:"count"` // default 1
	Pool     string            `json:"pool"`  // a name of Config.Pools or a pool UUID
	GPUs     int               `json:"gpus"`
	VRAM     Size              `json:"vram"`  // per GPU: bytes, or a string like "24GiB"
	Model    string            `json:"model"` // GPU name reported (default "Emulated GPU")
	Labels   map[string]string `json:"labels"`
	Taints   map[string]string `json:"taints"`
	Address  string            `json:"address"` // host:port reported for clients (the real agent's -expose); nothing listens there
	Hostname string            `json:"hostname"`
}

// Duration is a time.Duration written as "1s" in JSON.
type Duration time.Duration

// UnmarshalJSON accepts "1s" or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		*d = Duration(v)
		return err
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration: %s", b)
	}
	*d = Duration(n)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Size is a byte count written as a number or as "24GiB".
type Size uint64

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)$`)

// ParseSize reads "24GiB", "1.5GiB", "512MiB", "80GB" or "1073741824B".
func ParseSize(s string) (Size, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("size %q: want a number with a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)", s)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, err
	}
	mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
		"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m[2]]
	return Size(v * mult), nil
}

// UnmarshalJSON accepts a number of bytes or a string with a unit.
func (s *Size) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err == nil {
		v, err := ParseSize(str)
		*s = v
		return err
	}
	var n uint64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("size: %s", b)
	}
	*s = Size(n)
	return nil
}

// LoadConfig reads a JSON configuration file; unknown fields are errors.
func LoadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	var c Config
	dec := json.NewDecoder(f)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// AgentSpec is one agent after expansion of Count and resolution of its pool.
type AgentSpec struct {
	Name     string
	PoolName string
	PoolID   string
	GPUs     []uint64
	Model    string
	Labels   map[string]string
	Taints   map[string]string
	Address  string
	Hostname string
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// withDefaults fills the defaults and checks the configuration.
func (c Config) withDefaults() (Config, error) {
	if c.Interval == 0 {
		c.Interval = Duration(time.Second)
	}
	if c.Version == "" {
		c.Version = "0.0.0"
	}
	if c.BasePort == 0 {
		c.BasePort = 47000
	}
	if c.Controller == "" {
		return c, errors.New("controller: missing (host:port of the legacy controller)")
	}
	if len(c.Agents) == 0 {
		return c, errors.New("agents: none configured")
	}
	if c.Admin != "" {
		host, _, err := net.SplitHostPort(c.Admin)
		if err != nil {
			return c, fmt.Errorf("admin: %w", err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return c, fmt.Errorf("admin %s: the admin API has no authentication and listens on loopback only", c.Admin)
		}
	}
	return c, nil
}

// Specs expands the agents of the configuration.
func (c Config) Specs() ([]AgentSpec, error) {
	var out []AgentSpec
	seen := map[string]bool{}
	port := c.BasePort
	if port == 0 {
		port = 47000
	}
	for i, a := range c.Agents {
		if a.Name == "" {
			return nil, fmt.Errorf("agents[%d]: name missing", i)
		}
		if a.GPUs <= 0 {
			return nil, fmt.Errorf("agent %s: gpus must be at least 1", a.Name)
		}
		if a.VRAM == 0 {
			return nil, fmt.Errorf("agent %s: vram missing", a.Name)
		}
		poolID := a.Pool
		if id, ok := c.Pools[a.Pool]; ok {
			poolID = id
		}
		if !uuidRE.MatchString(poolID) {
			// The controller stores uuid.FromStringOrNil(poolId): anything else silently becomes the nil UUID.
			return nil, fmt.Errorf("agent %s: pool %q is neither a pool UUID nor a name in pools", a.Name, a.Pool)
		}
		n := a.Count
		if n == 0 {
			n = 1
		}
		for k := 1; k <= n; k++ {
			name := a.Name
			if n > 1 {
				name = fmt.Sprintf("%s-%d", a.Name, k)
			}
			if seen[name] {
				return nil, fmt.Errorf("agent name %s used twice", name)
			}
			seen[name] = true
			s := AgentSpec{Name: name, PoolName: a.Pool, PoolID: poolID, Model: a.Model,
				Labels: a.Labels, Taints: a.Taints, Address: a.Address, Hostname: a.Hostname}
			if n > 1 && a.Address != "" {
				return nil, fmt.Errorf("agent %s: address with count > 1", a.Name)
			}
			if s.Address == "" {
				s.Address = fmt.Sprintf("127.0.0.1:%d", port)
			}
			port++
			if s.Hostname == "" {
				s.Hostname = name
			}
			if s.Model == "" {
				s.Model = "Emulated GPU"
			}
			for g := 0; g < a.GPUs; g++ {
				s.GPUs = append(s.GPUs, uint64(a.VRAM))
			}
			out = append(out, s)
		}
	}
	return out, nil
}
