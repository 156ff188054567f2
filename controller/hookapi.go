package controller

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/juice-slurm/juice-slurm/reconcile"
)

// The hook API is what the slurmctld prolog and epilog talk to, through `juice-slurm hook prolog|epilog`.
// Every replica serves it from PostgreSQL; none needs to lead.
//
//	POST /v1/prolog  PrologRequest → PrologReply   wait (bounded) until the run's session is ready or failed
//	POST /v1/epilog  EpilogRequest → EpilogReply   the run is finished; wait (bounded) for the release
//	GET  /healthz    the process answers
//	GET  /readyz     the database answers
//	GET  /metrics    Prometheus
//
// The hook endpoints need "Authorization: Bearer <hook secret>"; a call without it gets 401 and changes nothing.

// PrologRequest names the run and, when the reconciler may not have seen the job yet, its request.
type PrologRequest struct {
	Cluster   string `json:"cluster"`
	JobID     uint32 `json:"job_id"`
	Run       int    `json:"run"`
	Request   string `json:"request,omitempty"`
	User      string `json:"user,omitempty"`
	Partition string `json:"partition,omitempty"`
	// WaitSeconds bounds this call's wait; the hook calls again until its own deadline, logging progress.
	WaitSeconds float64 `json:"wait_seconds"`
}

// Outcomes of a hook call.
const (
	OutcomeReady    = "ready"    // the session file is in Session
	OutcomeFailed   = "failed"   // the run cannot be served; Reason says why
	OutcomeWaiting  = "waiting"  // not yet; call again
	OutcomeNone     = "none"     // the run asked nothing of Juice
	OutcomeReleased = "released" // (epilog) the session is released
)

// PrologReply is the answer: the sealed session file when ready.
type PrologReply struct {
	Outcome string `json:"outcome"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Session is the sealed session file, to be written as File in the state directory.
	Session []byte `json:"session,omitempty"`
	File    string `json:"file,omitempty"`
}

// EpilogRequest says a run is finished.
type EpilogRequest struct {
	Cluster     string  `json:"cluster"`
	JobID       uint32  `json:"job_id"`
	Run         int     `json:"run"`
	ExitCode    string  `json:"exit_code,omitempty"`
	WaitSeconds float64 `json:"wait_seconds"`
}

// EpilogReply says where the release stands.
type EpilogReply struct {
	Outcome string `json:"outcome"`
	State   string `json:"state,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// HookAPI serves the hooks.
type HookAPI struct {
	Store   reconcile.Store
	Hub     *Hub
	Secret  []byte
	Metrics *Metrics
	Log     logr.Logger
	// Ready reports whether the replica can serve (the database answers).
	Ready func(ctx context.Context) error
	// Recheck is the fallback re-read of a waited-on row when no notification comes. Default 1s.
	Recheck time.Duration
	// MaxWait caps one call's wait. Default 30s.
	MaxWait time.Duration
}

// LoadSecret reads the hook secret file; like the cluster key, it must not be readable by group or others.
func LoadSecret(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("hook secret: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("hook secret %s: mode %#o lets group or others read it; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("hook secret: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < 16 {
		return nil, fmt.Errorf("hook secret %s: %d characters; use at least 16 (openssl rand -hex 32)", path, len(s))
	}
	return []byte(s), nil
}

// Handler returns the HTTP handler.
func (a *HookAPI) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/prolog", a.auth(a.prolog))
	mux.HandleFunc("POST /v1/epilog", a.auth(a.epilog))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if a.Ready != nil {
			if err := a.Ready(r.Context()); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
	})
	if a.Metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(a.Metrics.Registry, promhttp.HandlerOpts{}))
	}
	return mux
}

func (a *HookAPI) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || len(a.Secret) == 0 || subtle.ConstantTimeCompare([]byte(got), a.Secret) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="juice-slurm hooks"`)
			http.Error(w, "unauthorized: the hook secret is missing or wrong", http.StatusUnauthorized)
			return
		}
		next(w, r)
	}
}

func (a *HookAPI) prolog(w http.ResponseWriter, r *http.Request) {
	var in PrologRequest
	if !decode(w, r, &in) {
		return
	}
	start := time.Now()
	run := reconcile.RunID{Cluster: in.Cluster, JobID: in.JobID, Run: in.Run}
	log := a.Log.WithValues("job", in.JobID, "run", in.Run)
	res, err := a.Store.ForRun(r.Context(), run)
	if errors.Is(err, reconcile.ErrNotFound) || err == nil && res.State == reconcile.StateReleased && in.Request != "" {
		if in.Request == "" {
			reply(w, PrologReply{Outcome: OutcomeNone, Reason: "no Juice request for this run"})
			return
		}
		req, perr := reconcile.ParseRequest(in.Request)
		if perr != nil {
			http.Error(w, "bad request: "+perr.Error(), http.StatusBadRequest)
			return
		}
		// The prolog came before the poller saw the job (or the job was never pending long enough):
		// register the run now; the leader hears of it through NOTIFY.
		var created bool
		res, created, err = a.Store.Ensure(r.Context(), reconcile.NewReservation{Run: run, Request: req, UserName: in.User,
			Partition: in.Partition, JobState: "CONFIGURING", Reason: "registered by the prolog: " + req.Describe()})
		if created {
			log.Info("prolog registered a run the reconciler had not seen", "request", req.String())
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := a.wait(r.Context(), res, in.WaitSeconds, func(r *reconcile.Reservation) bool {
		return r.State == reconcile.StateReady || r.Failed() || r.State.Final()
	})
	rep := PrologReply{Outcome: OutcomeWaiting, State: string(out.State), Reason: out.Reason}
	switch {
	case out.State == reconcile.StateReady:
		rep.Outcome, rep.Session, rep.File = OutcomeReady, out.Sealed, reconcile.SessionFileName(out.Run)
	case out.Failed():
		rep.Outcome, rep.Reason = OutcomeFailed, out.FailReason
	case out.State == reconcile.StateReleased:
		rep.Outcome = OutcomeFailed
		rep.Reason = "the reservation was released before the job started: " + out.Reason
	}
	if rep.Outcome != OutcomeWaiting {
		a.Metrics.observePrologWait(time.Since(start), rep.Outcome)
	}
	reply(w, rep)
}

func (a *HookAPI) epilog(w http.ResponseWriter, r *http.Request) {
	var in EpilogRequest
	if !decode(w, r, &in) {
		return
	}
	run := reconcile.RunID{Cluster: in.Cluster, JobID: in.JobID, Run: in.Run}
	res, err := a.Store.ForRun(r.Context(), run)
	if errors.Is(err, reconcile.ErrNotFound) {
		reply(w, EpilogReply{Outcome: OutcomeNone, Reason: "no reservation for this run"})
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	reason := fmt.Sprintf("job %d run %d finished (epilog", in.JobID, in.Run)
	if in.ExitCode != "" {
		reason += ", exit code " + in.ExitCode
	}
	reason += ")"
	// The leader's work queue hears of the change through NOTIFY; no enqueue is needed here.
	if err := Unwant(r.Context(), a.Store, &res, reason, "ENDED", true, nil); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := a.wait(r.Context(), res, in.WaitSeconds, func(r *reconcile.Reservation) bool { return r.State.Final() })
	rep := EpilogReply{Outcome: OutcomeWaiting, State: string(out.State), Reason: out.Reason}
	if out.State.Final() {
		rep.Outcome = OutcomeReleased
	}
	reply(w, rep)
}

// wait returns the reservation as soon as done holds for it, or when the wait is over. It wakes on NOTIFY and
// re-reads the row every Recheck in case a notification was lost.
func (a *HookAPI) wait(ctx context.Context, r reconcile.Reservation, seconds float64, done func(*reconcile.Reservation) bool) reconcile.Reservation {
	if done(&r) {
		return r
	}
	max := a.MaxWait
	if max == 0 {
		max = 30 * time.Second
	}
	d := time.Duration(seconds * float64(time.Second))
	if d <= 0 || d > max {
		d = max
	}
	recheck := a.Recheck
	if recheck == 0 {
		recheck = time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wake <-chan struct{}
	if a.Hub != nil {
		ch, unsub := a.Hub.Subscribe(r.ID)
		defer unsub()
		wake = ch
		// A change between the caller's read and the subscription would be missed: read once more.
		if fresh, err := a.Store.Get(ctx, r.ID); err == nil {
			r = fresh
			if done(&r) {
				return r
			}
		}
	}
	t := time.NewTicker(recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return r
		case <-wake:
		case <-t.C:
		}
		fresh, err := a.Store.Get(ctx, r.ID)
		if err != nil {
			if ctx.Err() != nil {
				return r
			}
			a.Log.Error(err, "re-read a waited-on reservation", "reservation", r.ID)
			continue
		}
		r = fresh
		if done(&r) {
			return r
		}
	}
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
