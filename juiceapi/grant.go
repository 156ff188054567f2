package juiceapi

import (
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/internal/vram"
)

// keyTag carries a reservation's key inside the session's version field: the legacy controller ignores
// Idempotency-Key and keeps no field of ours, but it stores the requirements' version and echoes it in
// GET /v1/session/{id} and in its agents' sessions. That is how a run's sessions are found again.
const keyTag = " key="

// TaggedVersion is the version field sent with a request under key.
func TaggedVersion(version string, key uuid.UUID) string { return version + keyTag + key.String() }

// Key returns the key a session was requested under: the simulator's idempotencyKey field, else the tag in
// its version field; "" when it carries none (another client's session).
func (s *Session) Key() string {
	if s.IdempotencyKey != "" {
		return s.IdempotencyKey
	}
	if i := strings.LastIndex(s.Version, keyTag); i >= 0 {
		return s.Version[i+len(keyTag):]
	}
	return ""
}

// Unassigned reports whether no agent holds the session yet. The legacy controller answers a queued session
// with an empty id and state (its read of the missing GPUs fails and it answers the zero session), and goes on
// doing so once such a session was cancelled.
func (s *Session) Unassigned() bool { return s.ID == "" || s.State == "" || s.State == StateQueued }

// CheckGrant says why an active session does not serve req ("" when it does): no agent address, fewer
// distinct GPUs than asked, or less VRAM than the slice asked on the GPUs it gives. A controller that gives
// more is fine (GrantedGPUs hands the job exactly what it asked for).
func CheckGrant(s *Session, req SessionRequest) string {
	switch {
	case s.ID == "" || s.State == "":
		return "the Juice Controller answered with an empty session (id and state empty: not assigned yet)"
	case s.Address == "":
		return fmt.Sprintf("session %s is %s without an agent address", s.ID, s.State)
	}
	if n := len(GrantedGPUs(s, req)); n < req.GPUs {
		what := "GPU(s)"
		if req.VRAMPerGPU > 0 {
			what = fmt.Sprintf("GPU(s) with at least %s of VRAM", vram.Readable(req.VRAMPerGPU))
		}
		return fmt.Sprintf("session %s gives %d %s for %d asked (GPUs %s)", s.ID, n, what, req.GPUs, describeGPUs(s.GPUs))
	}
	return ""
}

// GrantedGPUs returns the GPU indexes of s that serve req, lowest first and at most req.GPUs of them: the
// distinct GPUs with at least the slice asked (any, for whole GPUs).
func GrantedGPUs(s *Session, req SessionRequest) []int {
	var out []int
	for _, g := range s.GPUs {
		if g.Index < 0 || slices.Contains(out, g.Index) || req.VRAMPerGPU > 0 && g.VRAMRequired < req.VRAMPerGPU {
			continue
		}
		out = append(out, g.Index)
	}
	slices.Sort(out)
	if len(out) > req.GPUs {
		out = out[:req.GPUs]
	}
	return out
}

func describeGPUs(gs []SessionGPU) string {
	if len(gs) == 0 {
		return "none"
	}
	parts := make([]string, len(gs))
	for i, g := range gs {
		parts[i] = fmt.Sprintf("%d:%dB", g.Index, g.VRAMRequired)
	}
	return strings.Join(parts, ",")
}

// CanEverFit says why no agent of agents can ever hold req, even idle ("" when one can): GPU count, VRAM per
// GPU, labels and taints. Only active agents count; the legacy controller places on active agents only, and
// exits when none of them fits a request.
func CanEverFit(agents []Agent, req SessionRequest) string {
	maxGPUs, maxVRAM, active := 0, uint64(0), 0
	for _, a := range agents {
		if a.State != AgentActive {
			continue
		}
		active++
		if !labelsMatch(a, req) {
			continue
		}
		fits := 0
		for _, g := range a.GPUs {
			maxVRAM = max(maxVRAM, g.VRAM)
			if g.VRAM >= req.VRAMPerGPU {
				fits++
			}
		}
		maxGPUs = max(maxGPUs, len(a.GPUs))
		if fits >= req.GPUs {
			return ""
		}
	}
	if active == 0 {
		return ""
	}
	each := "whole GPU"
	if req.VRAMPerGPU > 0 {
		each = vram.Readable(req.VRAMPerGPU)
	}
	extra := ""
	if len(req.MatchLabels) > 0 || len(req.Tolerates) > 0 {
		extra = fmt.Sprintf(" with labels %v and tolerations %v", req.MatchLabels, req.Tolerates)
	}
	return fmt.Sprintf("no active agent%s can ever fit %d GPU(s) x %s (largest matching agent: %d GPUs, largest GPU: %s)",
		extra, req.GPUs, each, maxGPUs, vram.Readable(maxVRAM))
}

func labelsMatch(a Agent, req SessionRequest) bool {
	for k, v := range req.MatchLabels {
		if got, ok := a.Labels[k]; !ok || got != v {
			return false
		}
	}
	for k, v := range a.Taints {
		if got, ok := req.Tolerates[k]; !ok || got != v {
			return false
		}
	}
	return true
}
