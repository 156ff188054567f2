package juicesim

import (
	"errors"
	"io"
	"net/http"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// The admin API is the simulator's own (no real controller has it). It needs the same bearer
// token as /v1, and answers errors with proper 4xx codes and text/plain.

// handleAdminSessions lists every session, closed ones included (?state= and ?pool= filter).
func (s *Sim) handleAdminSessions(w http.ResponseWriter, r *http.Request) {
	state, pool := r.URL.Query().Get("state"), r.URL.Query().Get("pool")
	out := []juiceapi.Session{}
	for _, ss := range s.Sessions() {
		if (state == "" || ss.State == state) && (pool == "" || ss.PoolID == pool) {
			out = append(out, ss)
		}
	}
	writeJSON(w, out)
}

func (s *Sim) handleGetFaults(w http.ResponseWriter, _ *http.Request) { writeJSON(w, s.Faults()) }

// handlePutFaults replaces all faults: fields left out are zero, so {} turns faults off.
func (s *Sim) handlePutFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if err := decodeBody(r, &f); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if err := s.SetFaults(f); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	writeJSON(w, s.Faults())
}

// handleAdminAgent sets an agent's state: {"state":"missing"} makes it vanish (its sessions close),
// {"state":"active"} brings it back.
func (s *Sim) handleAdminAgent(w http.ResponseWriter, r *http.Request) {
	var in struct {
		State string `json:"state"`
	}
	if err := decodeBody(r, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	id := r.PathValue("id")
	if err := s.SetAgentState(id, in.State); err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, errNotFound) {
			code = http.StatusNotFound
		}
		http.Error(w, err.Error(), code)
		return
	}
	s.mu.Lock()
	v := s.agents[id].view()
	s.mu.Unlock()
	writeJSON(w, v)
}

// handleAdminStep runs one scheduler pass now, for demos with a slow tick.
func (s *Sim) handleAdminStep(w http.ResponseWriter, _ *http.Request) {
	s.Step()
	w.WriteHeader(http.StatusNoContent)
}

// handleAdminCheck verifies the allocation bookkeeping: 200 "ok" or 500 with the violation.
func (s *Sim) handleAdminCheck(w http.ResponseWriter, _ *http.Request) {
	if err := s.Check(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}
