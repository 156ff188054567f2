package agentemu

import (
	"errors"
	"fmt"
	"sort"
	"time"
)

// Machine is one agent's session bookkeeping, without any I/O: what cmd/agent/app/controller.go and agent.go of
// the legacy agent do with the controller's view of the agent on every tick.
//
//   - A session the controller lists as "assigned" is started: its GPUs are taken by index (the VRAM it names is
//     subtracted from each, unchecked) and "active" is queued for the next update.
//   - A session listed as "canceling" is stopped: its VRAM is given back and "closed" is queued. When the agent
//     does not hold it (say the controller reopened a closed session), the real agent fails with "unable to cancel
//     session" and exits after sending its update; Observe returns that error.
//   - Every other state is ignored: the real agent does not look at "active" sessions it does not hold.
//
// A Machine is not safe for concurrent use; Agent serialises access.
type Machine struct {
	gpus    []gpuState
	held    map[string]*Held
	pending map[string]string // session id -> state for the next update
	closed  []Closed          // most recent last, at most keepClosed
}

type gpuState struct {
	vram uint64
	free int64 // signed: the real agent's uint64 wraps when a session takes more than is free
}

// Held is a session the agent runs.
type Held struct {
	ID       string       `json:"id"`
	Version  string       `json:"version"`
	GPUs     []SessionGPU `json:"gpus"`
	Assigned time.Time    `json:"assignedSeen"`             // when the agent first saw it assigned
	Reported time.Time    `json:"activeReported,omitempty"` // when "active" was handed to an update
}

// Closed is a session the agent ran and closed.
type Closed struct {
	ID        string    `json:"id"`
	Assigned  time.Time `json:"assignedSeen"`
	Canceling time.Time `json:"cancelingSeen"`
}

const keepClosed = 200

// Event kinds Observe reports.
const (
	EventAssigned      = "assigned-seen"   // a session listed as assigned was started
	EventAssignedAgain = "assigned-again"  // listed as assigned while already held: "active" is sent again
	EventCanceling     = "canceling-seen"  // a held session listed as canceling was stopped
	EventCancelUnknown = "cancel-unknown"  // canceling a session the agent does not hold (the real agent exits)
	EventBadAssignment = "bad-assignment"  // an assignment the real agent would crash on (no GPUs, bad index)
	EventActive        = "active-reported" // "active" went out in an update
	EventClosedReport  = "closed-reported" // "closed" went out in an update
)

// Event is one thing that happened to a session on an agent.
type Event struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"time"`
	Agent   string    `json:"agent"`   // the agent's name in the emulator's configuration
	AgentID string    `json:"agentId"` // the controller's id for it
	Kind    string    `json:"kind"`
	Session string    `json:"session,omitempty"`
	Detail  string    `json:"detail,omitempty"`
}

// NewMachine makes the bookkeeping of an agent with these GPUs (VRAM in bytes, by index).
func NewMachine(vram []uint64) *Machine {
	m := &Machine{held: map[string]*Held{}, pending: map[string]string{}}
	for _, v := range vram {
		m.gpus = append(m.gpus, gpuState{vram: v, free: int64(v)})
	}
	return m
}

// Observe applies the sessions of GET /v1/agent/{id}. It returns what happened and, joined, the errors the real
// agent would exit on once it has sent its update.
func (m *Machine) Observe(now time.Time, sessions []Session) ([]Event, error) {
	var events []Event
	var errs []error
	for _, s := range sessions {
		switch s.State {
		case SessionAssigned:
			if h, ok := m.held[s.ID]; ok {
				// The real agent would start the session a second time and take its VRAM twice; we only
				// repeat "active", which the controller evidently did not get.
				m.pending[s.ID] = SessionActive
				events = append(events, Event{Time: now, Kind: EventAssignedAgain, Session: h.ID})
				continue
			}
			if err := m.checkGPUs(s.GPUs); err != nil {
				events = append(events, Event{Time: now, Kind: EventBadAssignment, Session: s.ID, Detail: err.Error()})
				errs = append(errs, fmt.Errorf("session %s: %w", s.ID, err))
				continue
			}
			for _, g := range s.GPUs {
				m.gpus[g.Index].free -= int64(g.VRAMRequired)
			}
			m.held[s.ID] = &Held{ID: s.ID, Version: s.Version, GPUs: append([]SessionGPU(nil), s.GPUs...), Assigned: now}
			m.pending[s.ID] = SessionActive
			events = append(events, Event{Time: now, Kind: EventAssigned, Session: s.ID, Detail: gpuList(s.GPUs)})
		case SessionCanceling:
			h, ok := m.held[s.ID]
			if !ok {
				if m.pending[s.ID] == SessionClosed {
					continue // closed but not yet sent (a failed update being retried)
				}
				events = append(events, Event{Time: now, Kind: EventCancelUnknown, Session: s.ID})
				errs = append(errs, fmt.Errorf("unable to cancel session: session with id %s not found", s.ID))
				continue
			}
			for _, g := range h.GPUs {
				m.gpus[g.Index].free += int64(g.VRAMRequired)
			}
			delete(m.held, s.ID)
			m.pending[s.ID] = SessionClosed
			m.closed = append(m.closed, Closed{ID: s.ID, Assigned: h.Assigned, Canceling: now})
			if len(m.closed) > keepClosed {
				m.closed = m.closed[len(m.closed)-keepClosed:]
			}
			events = append(events, Event{Time: now, Kind: EventCanceling, Session: s.ID})
		}
	}
	return events, errors.Join(errs...)
}

// checkGPUs is where the real agent panics: GpuSet.Select with no GPUs (logger.Panic) or with an index out of
// range (a slice index panic).
func (m *Machine) checkGPUs(gpus []SessionGPU) error {
	if len(gpus) == 0 {
		return errors.New("assigned with no GPUs (the real agent panics: GpuSet.Select: expected at least one chosen GPU)")
	}
	for _, g := range gpus {
		if g.Index < 0 || g.Index >= len(m.gpus) {
			return fmt.Errorf("assigned GPU index %d of an agent with %d GPUs (the real agent panics: index out of range)", g.Index, len(m.gpus))
		}
	}
	return nil
}

func gpuList(gpus []SessionGPU) string {
	s := ""
	for i, g := range gpus {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("%d:%d", g.Index, g.VRAMRequired)
	}
	return s
}

// Update takes the queued session states into the body of PUT /v1/agent/{id}, as the real agent does on every
// tick (with a "connections" map that is always empty: no client ever connects to an emulated agent) and with
// one metrics entry per GPU.
func (m *Machine) Update(now time.Time, id string) (AgentUpdate, []Event) {
	u := AgentUpdate{ID: id, State: AgentActive, Sessions: map[string]SessionUpdate{}, GPUs: m.metrics()}
	var events []Event
	for _, sid := range sortedKeys(m.pending) {
		st := m.pending[sid]
		u.Sessions[sid] = SessionUpdate{State: st, Connections: map[string]Connection{}}
		var kind string
		switch st {
		case SessionActive:
			kind = EventActive
			if h, ok := m.held[sid]; ok && h.Reported.IsZero() {
				h.Reported = now
			}
		case SessionClosed:
			kind = EventClosedReport
		default:
			kind = st + "-reported"
		}
		events = append(events, Event{Time: now, Kind: kind, Session: sid})
	}
	m.pending = map[string]string{}
	return u, events
}

// Requeue puts back the session states of an update that was not delivered, unless newer ones are queued.
func (m *Machine) Requeue(u AgentUpdate) {
	for sid, su := range u.Sessions {
		if _, ok := m.pending[sid]; !ok {
			m.pending[sid] = su.State
		}
	}
}

// Forget drops every session, as a restarted agent process starts with none.
func (m *Machine) Forget() {
	for i := range m.gpus {
		m.gpus[i].free = int64(m.gpus[i].vram)
	}
	m.held = map[string]*Held{}
	m.pending = map[string]string{}
}

func (m *Machine) metrics() []GPUMetrics {
	out := make([]GPUMetrics, len(m.gpus))
	for i, g := range m.gpus {
		used := int64(g.vram) - g.free
		if used < 0 {
			used = 0
		}
		out[i] = GPUMetrics{VRAMUsed: uint64(used), PowerLimit: 300, ClockCore: 1410, ClockMemory: 1215}
	}
	return out
}

// GPUView is one GPU as the admin API shows it.
type GPUView struct {
	Index    int    `json:"index"`
	VRAM     uint64 `json:"vram"`
	VRAMFree int64  `json:"vramFree"` // negative when sessions took more than the GPU has (unchecked, as in the real agent)
	Sessions int    `json:"sessions"`
}

// Snapshot is the machine's state for the admin API.
type Snapshot struct {
	GPUs     []GPUView         `json:"gpus"`
	Sessions []Held            `json:"sessions"` // held, by id
	Pending  map[string]string `json:"pending"`  // queued for the next update
	Closed   []Closed          `json:"closed"`   // recently closed, oldest first
}

// Snapshot copies the machine's state.
func (m *Machine) Snapshot() Snapshot {
	s := Snapshot{Pending: map[string]string{}, Closed: append([]Closed{}, m.closed...), Sessions: []Held{}}
	count := make([]int, len(m.gpus))
	for _, id := range sortedKeys(m.held) {
		h := *m.held[id]
		h.GPUs = append([]SessionGPU(nil), h.GPUs...)
		s.Sessions = append(s.Sessions, h)
		for _, g := range h.GPUs {
			count[g.Index]++
		}
	}
	for i, g := range m.gpus {
		s.GPUs = append(s.GPUs, GPUView{Index: i, VRAM: g.vram, VRAMFree: g.free, Sessions: count[i]})
	}
	for k, v := range m.pending {
		s.Pending[k] = v
	}
	return s
}

// Holds reports whether the agent runs the session.
func (m *Machine) Holds(id string) bool { _, ok := m.held[id]; return ok }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
