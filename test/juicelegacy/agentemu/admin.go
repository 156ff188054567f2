package agentemu

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// AdminHandler is the emulator's admin API (no authentication: serve it on loopback only).
//
//	GET  /healthz                    200 "ok" once every agent registered; 503 with what it waits for, or who exited
//	GET  /agents                     every agent: id, state, pool, GPUs with free VRAM, sessions held, counters
//	GET  /agents/{name}              one agent (by name or controller id)
//	POST /agents/{name}/stop         stop reporting (agent loss); sessions are kept
//	POST /agents/{name}/resume       report again with the same id and sessions
//	POST /agents/{name}/restart      forget the sessions and register again under a new id (a restarted agent)
//	POST /agents/{name}/close        send state "closed" and stop (a shut-down agent)
//	GET  /events?since=SEQ           session and agent events, oldest first (sequence numbers grow)
//	GET  /sessions/{id}              which agent holds a session, or held it, and the events about it
func (e *Emulator) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		var waiting, exited []string
		for _, a := range e.agents {
			st := a.Status()
			switch {
			case st.ID == "" && st.State == StateExited:
				exited = append(exited, st.Name+": "+st.Reason)
			case st.ID == "":
				waiting = append(waiting, st.Name)
			}
		}
		switch {
		case len(exited) > 0:
			http.Error(w, "exited before registering: "+strings.Join(exited, "; "), http.StatusServiceUnavailable)
		case len(waiting) > 0:
			http.Error(w, "registering: "+strings.Join(waiting, ", "), http.StatusServiceUnavailable)
		default:
			fmt.Fprintf(w, "ok: %d agents registered\n", len(e.agents))
		}
	})
	mux.HandleFunc("GET /agents", func(w http.ResponseWriter, r *http.Request) {
		out := []Status{}
		for _, a := range e.agents {
			out = append(out, a.Status())
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /agents/{name}", func(w http.ResponseWriter, r *http.Request) {
		if a := e.lookup(w, r); a != nil {
			writeJSON(w, http.StatusOK, a.Status())
		}
	})
	mux.HandleFunc("POST /agents/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		a := e.lookup(w, r)
		if a == nil {
			return
		}
		switch r.PathValue("action") {
		case "stop":
			a.Stop()
		case "resume":
			_ = a.Resume()
		case "restart":
			a.Restart()
		case "close":
			ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
			defer cancel()
			if err := a.Close(ctx); err != nil {
				writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
				return
			}
		default:
			http.Error(w, "unknown action (stop, resume, restart, close)", http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, a.Status())
	})
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		writeJSON(w, http.StatusOK, e.Events(since))
	})
	mux.HandleFunc("GET /sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		type where struct {
			Agent   string  `json:"agent"`
			AgentID string  `json:"agentId"`
			Held    bool    `json:"held"`
			Events  []Event `json:"events"`
		}
		out := where{Events: []Event{}}
		for _, ev := range e.Events(0) {
			if ev.Session == id {
				out.Events = append(out.Events, ev)
				out.Agent, out.AgentID = ev.Agent, ev.AgentID
			}
		}
		if a := e.Agent(out.Agent); a != nil {
			a.mu.Lock()
			out.Held = a.machine.Holds(id)
			a.mu.Unlock()
		}
		if len(out.Events) == 0 {
			writeJSON(w, http.StatusNotFound, out)
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
	return mux
}

func (e *Emulator) lookup(w http.ResponseWriter, r *http.Request) *Agent {
	a := e.Agent(r.PathValue("name"))
	if a == nil {
		http.Error(w, "no such agent: "+r.PathValue("name"), http.StatusNotFound)
	}
	return a
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
