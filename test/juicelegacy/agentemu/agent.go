package agentemu

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"
)

// Agent states in the emulator (not the controller's agent states).
const (
	StateRegistering = "registering" // POST /v1/register/agent not yet answered
	StateRunning     = "running"     // updating every interval
	StateStopped     = "stopped"     // stopped by the admin API: silent, sessions kept (agent loss)
	StateExited      = "exited"      // stopped where the real agent exits; Reason says why
	StateClosed      = "closed"      // sent state "closed", as the real agent does when it shuts down
)

// Agent is one emulated GPU host.
type Agent struct {
	spec AgentSpec
	emu  *Emulator

	mu        sync.Mutex
	id        string
	state     string
	reason    string
	machine   *Machine
	cancel    context.CancelFunc
	done      chan struct{}
	gets      int64
	puts      int64
	errCount  int64
	lastErr   string
	lastGet   time.Time
	lastPut   time.Time
	lastBody  int // bytes of the last GET /v1/agent/{id}
	maxBody   int
	ctrlState string // the agent's state in the last GET
}

// Status is an agent as the admin API lists it.
type Status struct {
	Name            string            `json:"name"`
	ID              string            `json:"id"` // the controller's agent id
	State           string            `json:"state"`
	Reason          string            `json:"reason,omitempty"`
	Pool            string            `json:"pool"`
	PoolID          string            `json:"poolId"`
	Address         string            `json:"address"`
	Labels          map[string]string `json:"labels,omitempty"`
	Taints          map[string]string `json:"taints,omitempty"`
	ControllerState string            `json:"controllerState"` // the agent's state in the controller's last answer
	Gets            int64             `json:"gets"`
	Puts            int64             `json:"puts"`
	Errors          int64             `json:"errors"`
	LastError       string            `json:"lastError,omitempty"`
	LastGet         time.Time         `json:"lastGet"`
	LastPut         time.Time         `json:"lastPut"`
	LastBodyBytes   int               `json:"lastBodyBytes"`
	MaxBodyBytes    int               `json:"maxBodyBytes"`
	Snapshot
}

func newAgent(e *Emulator, s AgentSpec) *Agent {
	return &Agent{spec: s, emu: e, state: StateRegistering, machine: NewMachine(s.GPUs)}
}

// Name is the agent's name in the configuration.
func (a *Agent) Name() string { return a.spec.Name }

// Status copies the agent's state.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Status{
		Name: a.spec.Name, ID: a.id, State: a.state, Reason: a.reason, Pool: a.spec.PoolName, PoolID: a.spec.PoolID,
		Address: a.spec.Address, Labels: a.spec.Labels, Taints: a.spec.Taints, ControllerState: a.ctrlState,
		Gets: a.gets, Puts: a.puts, Errors: a.errCount, LastError: a.lastErr, LastGet: a.lastGet, LastPut: a.lastPut,
		LastBodyBytes: a.lastBody, MaxBodyBytes: a.maxBody, Snapshot: a.machine.Snapshot(),
	}
}

// registration is the body of POST /v1/register/agent, as the real agent fills it.
func (a *Agent) registration() AgentInfo {
	info := AgentInfo{
		ID:       fakeUUID("agent", a.spec.Name, time.Now().String()),
		State:    AgentActive,
		Hostname: a.spec.Hostname,
		Address:  a.spec.Address,
		Version:  a.emu.cfg.Version,
		PoolID:   a.spec.PoolID,
		Labels:   map[string]string{},
		Taints:   map[string]string{},
	}
	for k, v := range a.spec.Labels {
		info.Labels[k] = v
	}
	for k, v := range a.spec.Taints {
		info.Taints[k] = v
	}
	for i, vram := range a.spec.GPUs {
		info.GPUs = append(info.GPUs, GPU{
			Index: i, UUID: "GPU-" + fakeUUID("gpu", a.spec.Name, fmt.Sprint(i)), Name: a.spec.Model, Vendor: "NVIDIA",
			Model: a.spec.Model, VendorID: 0x10de, DeviceID: 0x20b5, Driver: "emulated", VRAM: vram,
			PCIBus: fmt.Sprintf("00000000:%02X:00.0", 0x10+i),
		})
	}
	return info
}

// fakeUUID makes a UUID-shaped string from its parts (deterministic for GPUs).
func fakeUUID(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	b := h.Sum(nil)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// start runs the agent's loop: register when it has no id, then update every interval.
func (a *Agent) start(parent context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(parent)
	a.cancel = cancel
	a.done = make(chan struct{})
	if a.id == "" {
		a.state = StateRegistering
	} else {
		a.state = StateRunning
	}
	a.reason = ""
	go a.run(ctx, a.done)
}

// halt stops the loop and waits for it; state becomes the one given (unless the loop ended on its own).
func (a *Agent) halt(state, reason string) {
	a.mu.Lock()
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancel = nil
	if a.state == StateRunning || a.state == StateRegistering {
		a.state, a.reason = state, reason
	}
}

func (a *Agent) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	cfg := a.emu.cfg
	a.mu.Lock()
	id := a.id
	a.mu.Unlock()
	if id == "" {
		newID, err := a.emu.client.register(ctx, a.registration())
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			// The real agent exits when registration fails.
			a.exit(fmt.Sprintf("failed to register with the controller: %v", err))
			return
		}
		a.mu.Lock()
		a.id, a.state, id = newID, StateRunning, newID
		a.mu.Unlock()
		a.emu.event(Event{Time: time.Now(), Agent: a.spec.Name, AgentID: id, Kind: "registered", Detail: a.spec.PoolID})
		a.emu.logf("agent %s registered as %s in pool %s (%s)", a.spec.Name, id, a.spec.PoolName, a.spec.PoolID)
	}
	t := time.NewTicker(time.Duration(cfg.Interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !a.tick(ctx, id) {
				return
			}
		}
	}
}

// tick is one round of the real agent's "Controller Update" task: GET the agent, act on its sessions, PUT the
// update. It returns false when the agent stops.
func (a *Agent) tick(ctx context.Context, id string) bool {
	keepGoing := a.emu.cfg.KeepGoing
	view, n, err := a.emu.client.getAgent(ctx, id)
	now := time.Now()
	if ctx.Err() != nil {
		return false
	}
	a.mu.Lock()
	a.gets++
	a.lastGet = now
	if err != nil {
		a.errCount++
		a.lastErr = err.Error()
		a.mu.Unlock()
		if !keepGoing {
			a.exit(err.Error())
			return false
		}
		return true
	}
	a.lastBody = n
	if n > a.maxBody {
		a.maxBody = n
	}
	a.ctrlState = view.State
	events, fatal := a.machine.Observe(now, view.Sessions)
	update, sent := a.machine.Update(now, id)
	a.mu.Unlock()
	a.emu.events(a.spec.Name, id, events)

	err = a.emu.client.putAgent(ctx, update)
	if ctx.Err() != nil {
		return false
	}
	a.mu.Lock()
	a.puts++
	if err != nil {
		a.errCount++
		a.lastErr = err.Error()
		if keepGoing {
			a.machine.Requeue(update)
		}
	} else {
		a.lastPut = time.Now()
	}
	if fatal != nil {
		a.errCount++
		a.lastErr = fatal.Error()
	}
	a.mu.Unlock()
	if err == nil {
		a.emu.events(a.spec.Name, id, sent)
	}
	if keepGoing {
		return true
	}
	// The real agent sends its update even when acting on the sessions failed, then exits on either error.
	if err = errors.Join(fatal, err); err != nil {
		a.exit(err.Error())
		return false
	}
	return true
}

// exit marks the agent exited from its own loop.
func (a *Agent) exit(reason string) {
	a.mu.Lock()
	a.state, a.reason = StateExited, reason
	id := a.id
	a.mu.Unlock()
	a.emu.event(Event{Time: time.Now(), Agent: a.spec.Name, AgentID: id, Kind: "exited", Detail: reason})
	a.emu.logf("agent %s (%s) exited as the real agent would: %s", a.spec.Name, id, reason)
}

// Stop silences the agent (agent loss): no GET, no PUT, sessions kept.
func (a *Agent) Stop() {
	a.halt(StateStopped, "stopped by the admin API")
	a.emu.event(Event{Time: time.Now(), Agent: a.spec.Name, AgentID: a.ID(), Kind: "stopped"})
}

// Resume restarts the loop of a stopped or exited agent with the same id and sessions.
func (a *Agent) Resume() error {
	a.mu.Lock()
	st := a.state
	a.mu.Unlock()
	if st == StateRunning || st == StateRegistering {
		return nil
	}
	a.halt(st, "")
	a.start(a.emu.ctx)
	a.emu.event(Event{Time: time.Now(), Agent: a.spec.Name, AgentID: a.ID(), Kind: "resumed"})
	return nil
}

// Restart is a restart of the real agent's process: sessions forgotten, registered again under a new id.
func (a *Agent) Restart() {
	a.halt(StateStopped, "restarting")
	a.mu.Lock()
	old := a.id
	a.id = ""
	a.machine.Forget()
	a.mu.Unlock()
	a.emu.event(Event{Time: time.Now(), Agent: a.spec.Name, AgentID: old, Kind: "restarted"})
	a.start(a.emu.ctx)
}

// Close is the real agent's shutdown: its loop ends and it sends PUT /v1/agent/{id} with state "closed".
func (a *Agent) Close(ctx context.Context) error {
	a.halt(StateClosed, "closed")
	a.mu.Lock()
	id := a.id
	a.state, a.reason = StateClosed, "closed"
	a.mu.Unlock()
	if id == "" {
		return nil
	}
	err := a.emu.client.putAgent(ctx, AgentUpdate{ID: id, State: AgentClosed})
	a.emu.event(Event{Time: time.Now(), Agent: a.spec.Name, AgentID: id, Kind: "closed", Detail: errString(err)})
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// ID is the controller's id for the agent ("" before registration).
func (a *Agent) ID() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id
}

// Emulator runs the agents of one configuration.
type Emulator struct {
	cfg    Config
	client *client
	agents []*Agent
	byName map[string]*Agent
	logger *log.Logger
	ctx    context.Context
	stop   context.CancelFunc

	evMu   sync.Mutex
	evSeq  int64
	evRing []Event
}

const keepEvents = 5000

// New makes an emulator; Start starts its agents.
func New(cfg Config, logger *log.Logger) (*Emulator, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	specs, err := cfg.Specs()
	if err != nil {
		return nil, err
	}
	e := &Emulator{cfg: cfg, client: newClient(cfg), byName: map[string]*Agent{}, logger: logger}
	for _, s := range specs {
		a := newAgent(e, s)
		e.agents = append(e.agents, a)
		e.byName[s.Name] = a
	}
	return e, nil
}

// Start registers every agent and starts their updates.
func (e *Emulator) Start(ctx context.Context) {
	e.ctx, e.stop = context.WithCancel(ctx)
	for _, a := range e.agents {
		a.start(e.ctx)
	}
}

// Shutdown closes every agent that runs (PUT state "closed"), as real agents do on SIGTERM.
func (e *Emulator) Shutdown(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range e.agents {
		a.mu.Lock()
		running := a.state == StateRunning
		a.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if running {
				if err := a.Close(ctx); err != nil {
					e.logf("agent %s: closing: %v", a.spec.Name, err)
				}
			} else {
				a.halt(StateStopped, "emulator shut down")
			}
		}()
	}
	wg.Wait()
	if e.stop != nil {
		e.stop()
	}
}

// Agents lists the agents in configuration order.
func (e *Emulator) Agents() []*Agent { return e.agents }

// Agent finds an agent by name or by controller id.
func (e *Emulator) Agent(nameOrID string) *Agent {
	if a, ok := e.byName[nameOrID]; ok {
		return a
	}
	for _, a := range e.agents {
		if a.ID() == nameOrID {
			return a
		}
	}
	return nil
}

func (e *Emulator) logf(format string, args ...any) {
	if e.logger != nil {
		e.logger.Printf(format, args...)
	}
}

func (e *Emulator) events(agent, id string, evs []Event) {
	for _, ev := range evs {
		ev.Agent, ev.AgentID = agent, id
		e.event(ev)
	}
}

func (e *Emulator) event(ev Event) {
	e.evMu.Lock()
	e.evSeq++
	ev.Seq = e.evSeq
	e.evRing = append(e.evRing, ev)
	if len(e.evRing) > keepEvents {
		e.evRing = e.evRing[len(e.evRing)-keepEvents:]
	}
	e.evMu.Unlock()
	if ev.Session != "" || ev.Kind == EventCancelUnknown {
		e.logf("agent %s: %s %s %s", ev.Agent, ev.Kind, ev.Session, ev.Detail)
	}
}

// Events returns the events with a sequence number above since, oldest first.
func (e *Emulator) Events(since int64) []Event {
	e.evMu.Lock()
	defer e.evMu.Unlock()
	out := []Event{}
	for _, ev := range e.evRing {
		if ev.Seq > since {
			out = append(out, ev)
		}
	}
	return out
}
