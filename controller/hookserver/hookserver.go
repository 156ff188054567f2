// Package hookserver serves the hook API (package hookapi) on every replica, from PostgreSQL: the prolog's wait
// for its run's session, the epilog's release, and a user's own runs (/v1/mine), with the caps that keep one peer
// from starving another (limits.go).
package hookserver

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"os/user"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/controller/notify"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Jobs reads one job from slurmrestd.
type Jobs interface {
	GetJob(ctx context.Context, id uint32) (*slurmrest.Job, error)
}

// Store is what the hook server reads and writes of the reservations (store.Store).
type Store interface {
	Cluster() string
	// LiveRunSealed is the run's live reservation and its sealed session file (nil when none), in one query.
	LiveRunSealed(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, []byte, error)
	ForRun(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, error)
	Get(ctx context.Context, id uuid.UUID) (reconcile.Reservation, error)
	Sealed(ctx context.Context, id uuid.UUID) ([]byte, error)
	EnsureRun(ctx context.Context, nr reconcile.NewReservation) (reconcile.Reservation, bool, error)
	UnwantRun(ctx context.Context, run reconcile.RunID, reason string, over bool) (bool, error)
	ForUser(ctx context.Context, user string, limit int) ([]reconcile.Reservation, error)
	Events(ctx context.Context, id uuid.UUID) ([]reconcile.Transition, error)
	ObserveJob(ctx context.Context, id uuid.UUID, jobState, jobReason string) error
	PoolWaits(ctx context.Context, pool string, except uuid.UUID) (bool, error)
}

// Metrics counts the hook server's calls and refusals (controller.Metrics).
type Metrics interface {
	ObserveHook(hook, outcome string)
	ObserveHookRefused(limit string)
	ObservePrologWait(d time.Duration, outcome string)
	ObserveSlurm(op string, err error)
}

// Server serves the hook API on every replica, from PostgreSQL: none needs to lead. It is an observer: a prolog
// for a run nobody has seen yet registers it, from the job's admin_comment as slurmrestd shows it, and an epilog
// records that the run is over; the reconciler does the rest.
type Server struct {
	Store  Store
	Hub    *notify.Hub
	Jobs   Jobs
	Secret *secretfile.File
	// Metrics, when set, counts the calls.
	Metrics Metrics
	Log     logr.Logger
	// JobRequest is the Juice request a job carries (controller.JobRequest, with the site's trust of comments),
	// for a run the prolog registers.
	JobRequest func(j *slurmrest.Job) (request.Request, error)
	// Unmunge is the path of unmunge, which names the user of a /v1/mine call from its MUNGE credential; empty:
	// /v1/mine is off.
	Unmunge string
	// Ready reports whether the replica can serve (the database answers).
	Ready func(ctx context.Context) error
	// Recheck is the fallback re-read of a waited-on row when no notification comes. Default 1s.
	Recheck time.Duration
	// MaxWait caps one call's wait. Default 30s.
	MaxWait time.Duration
	// MaxWaitsPerPeer caps one peer's concurrent calls (package peer: a local uid, or a remote address): a
	// call over it gets 429, which the hooks retry. Default DefaultMaxWaitsPerPeer.
	MaxWaitsPerPeer int
	// MaxConns and MaxConnsPerPeer cap the open connections, in all and of one peer (Listen). Defaults
	// DefaultMaxConns and DefaultMaxConnsPerPeer.
	MaxConns, MaxConnsPerPeer int
	// TLS, when set, makes the hook API serve TLS (hookapi.ServerTLS): the hooks send their secret only to a
	// listener that proves it holds the key of the certificate they pin. Nil serves plain HTTP (tests).
	TLS *tls.Config

	waits waitCounter
}

// Listen wraps ln for the hook API: a connection over a cap, of all connections or of its peer's, is closed at
// once, so that what one peer opens never keeps another out (F4); with TLS set, it serves TLS.
func (a *Server) Listen(ln net.Listener) net.Listener {
	max, perPeer := a.connCaps()
	ln = newLimitListener(ln, max, perPeer, func(string) { a.observeHookRefused("connections") })
	if a.TLS != nil {
		ln = tls.NewListener(ln, a.TLS)
	}
	return ln
}

// connCaps are MaxConns and MaxConnsPerPeer, or their defaults.
func (a *Server) connCaps() (max, perPeer int) {
	max, perPeer = a.MaxConns, a.MaxConnsPerPeer
	if max == 0 {
		max = DefaultMaxConns
	}
	if perPeer == 0 {
		perPeer = DefaultMaxConnsPerPeer
	}
	return max, perPeer
}

// ListenLocal wraps ln, a Unix socket's listener, for the hook API: a caller whose uid allowed refuses is
// disconnected at once, and the caps of Listen apply. No TLS: the kernel proves both ends (hookapi.DialUnix).
func (a *Server) ListenLocal(ln net.Listener, allowed func(uid uint32) bool) net.Listener {
	max, perPeer := a.connCaps()
	ln = &uidListener{Listener: ln, allowed: allowed, refused: func(uid uint32, err error) {
		a.observeHookRefused("uid")
		a.Log.V(1).Info("hook socket: a caller that may not call was disconnected", "uid", uid, "error", err)
	}}
	return newLimitListener(ln, max, perPeer, func(string) { a.observeHookRefused("connections") })
}

// HTTPServer is the hook API's server, with timeouts fit for long waits: a connection must finish its TLS
// handshake and headers within 10 s and its small body within 30 s, an answer may take the longest wait and then
// some, and an idle connection is closed after a minute. A connection that says nothing holds its place for 10 s
// at most. It serves on a listener from Listen.
func (a *Server) HTTPServer() *http.Server {
	return &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: a.maxWait() + 30*time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10,
		ConnContext: withPeer, ErrorLog: quietTLSLog(a.Log)}
}

// Handler returns the HTTP handler: the hooks' calls and the probes.
func (a *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/prolog", a.count("prolog", a.auth(a.prolog)))
	mux.HandleFunc("POST /v1/epilog", a.count("epilog", a.auth(a.epilog)))
	mux.HandleFunc("POST /v1/mine", a.count("mine", a.mine))
	Probes(mux, a.Ready, nil)
	return mux
}

// Probes adds /healthz (the process answers) and /readyz (ready, when set, says the replica can do its part) to
// mux: the hook API serves them, and so does the controller's metrics listener. warning, when set, adds a line
// to a ready answer for what is failing without making the replica unready (the license sync).
func Probes(mux *http.ServeMux, ready func(ctx context.Context) error, warning func() string) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			if err := ready(r.Context()); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ok")
		if warning != nil {
			if text := warning(); text != "" {
				fmt.Fprintln(w, "warning: "+text)
			}
		}
	})
}

// count counts each call of a hook by its outcome: the reply's, or what its HTTP status says.
func (a *Server) count(hook string, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := &outcomeRecorder{ResponseWriter: w, code: http.StatusOK}
		next(rec, r)
		outcome := rec.outcome
		switch {
		case rec.code == http.StatusUnauthorized:
			outcome = "unauthorized"
		case rec.code >= 400 && rec.code < 500:
			outcome = "bad_request"
		case rec.code >= 500 || outcome == "":
			outcome = "error"
		}
		a.observeHook(hook, outcome)
	}
}

// outcomeRecorder keeps the status code and the outcome of a hook's reply.
type outcomeRecorder struct {
	http.ResponseWriter
	code    int
	outcome string
}

func (o *outcomeRecorder) WriteHeader(code int) {
	o.code = code
	o.ResponseWriter.WriteHeader(code)
}

func (a *Server) auth(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		secret, err := a.Secret.Value()
		if err != nil {
			a.Log.Error(err, "cannot read the hook secret")
			http.Error(w, "the controller cannot read its hook secret", http.StatusServiceUnavailable)
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(secret)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="juice-slurm hooks"`)
			http.Error(w, "unauthorized: the hook secret is missing or wrong", http.StatusUnauthorized)
			return
		}
		leave, ok := a.enterWait(w, r)
		if !ok {
			return
		}
		defer leave()
		next(w, r)
	}
}

// enterWait takes a place among the concurrent calls of the caller's peer; over MaxWaitsPerPeer it answers 429,
// which the hooks retry, and reports false. The caller calls leave when its call is over.
func (a *Server) enterWait(w http.ResponseWriter, r *http.Request) (leave func(), ok bool) {
	max := a.MaxWaitsPerPeer
	if max <= 0 {
		max = DefaultMaxWaitsPerPeer
	}
	p := peerOf(r.Context())
	if !a.waits.enter(p, max) {
		a.observeHookRefused("waits_per_peer")
		http.Error(w, fmt.Sprintf("too many calls at once from %s (at most %d): try again", p, max), http.StatusTooManyRequests)
		return nil, false
	}
	return func() { a.waits.leave(p) }, true
}

// prologCall is what a prolog sends: this release's request, and the fields the prologs of the first release
// (schema 2, before spec and status were apart) also sent. Such a prolog may still be waiting when the replicas
// restart on this release (an upgrade, docs/admin.md section 8): it is served, and what those fields say is not
// used. The request is the one job_submit.lua recorded, and the user and partition slurmrestd's; never a hook's.
// Any other unknown field is still refused.
type prologCall struct {
	hookapi.PrologRequest
	Request   *string `json:"request,omitempty"`
	User      *string `json:"user,omitempty"`
	Partition *string `json:"partition,omitempty"`
}

func (a *Server) prolog(w http.ResponseWriter, r *http.Request) {
	var call prologCall
	if !decode(w, r, &call) {
		return
	}
	in := call.PrologRequest
	start := time.Now()
	run := reconcile.RunID{Cluster: in.Cluster, JobID: in.JobID, Run: in.Run}
	if in.Cluster != a.Store.Cluster() {
		http.Error(w, fmt.Sprintf("bad request: this controller serves cluster %q, not %q", a.Store.Cluster(), in.Cluster), http.StatusBadRequest)
		return
	}
	// A ready session's prolog is this one query: the row and its file together.
	res, sealed, err := a.Store.LiveRunSealed(r.Context(), run)
	if errors.Is(err, reconcile.ErrNotFound) {
		var rep *hookapi.PrologReply
		res, rep, err = a.register(r.Context(), run)
		if rep != nil {
			reply(w, *rep)
			return
		}
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if res.Spec.Wanted && !reconcile.Started(res.Spec.JobState) {
		// Slurm started the run (its prolog runs): recorded before anything waits on it, so that a reservation made
		// ahead is never taken for a pending job's (reconcile.MustYield) while the poller has not seen the start.
		if err := a.Store.ObserveJob(r.Context(), res.ID, "CONFIGURING", ""); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		res.Spec.JobState, res.Spec.JobReason = "CONFIGURING", ""
	}
	// Ready means ready with the file sealed for this very job: an array element reserved ahead is sealed again
	// for its job once bound to it. A reservation let go without ending its run is waited on until it is released:
	// the run is then reserved again.
	out := a.wait(r.Context(), res, in.WaitSeconds, func(r *reconcile.Reservation) bool {
		return r.SealedFor() || r.Failed() || r.Status.State.Final() || !r.Spec.Wanted && r.Spec.RunOver
	})
	rep := hookapi.PrologReply{Outcome: hookapi.OutcomeWaiting, State: string(out.Status.State), Reason: out.Status.Reason}
	switch {
	case out.Failed():
		rep.Outcome, rep.Reason = hookapi.OutcomeFailed, out.Status.FailReason
	case !out.Spec.Wanted && !out.Spec.RunOver:
		// Let go as the job started (it yielded its pool to another started job a moment before this one's start
		// was recorded): the next call registers the run again once the old reservation is released.
		rep.Reason = "the reservation made ahead was let go (" + out.Spec.WantReason + "): reserved again"
	case !out.Spec.Wanted || out.Status.State.Final():
		rep.Outcome = hookapi.OutcomeFailed
		rep.Reason = "the reservation was let go before the job started: " + out.Spec.WantReason
	case out.SealedFor():
		if out.ID != res.ID || out.Status.Version != res.Status.Version || sealed == nil {
			// The status changed during the wait (a status write bumps its version): its file is read now.
			if sealed, err = a.Store.Sealed(r.Context(), out.ID); err != nil || sealed == nil {
				// Moved on since it was read (lost, say): the next call sees where it went.
				break
			}
		}
		if h, err := session.HeaderOf(sealed); err != nil || h.Binding.Cluster != run.Cluster || h.Binding.JobID != run.JobID ||
			h.Binding.Run != run.Run || h.Binding.Reservation != out.ID {
			// Never a file sealed for another job: sealed again since it was read, the next call gets it.
			break
		}
		rep.Outcome, rep.Session, rep.File = hookapi.OutcomeReady, sealed, session.FileName(out.Run.Binding())
	}
	if rep.Outcome != hookapi.OutcomeWaiting {
		a.observePrologWait(time.Since(start), rep.Outcome)
	}
	reply(w, rep)
}

// register creates the reservation of a run that nobody has seen yet (the prolog came before the poller), from the
// job's request as slurmrestd shows it: never from anything the hook sends. It returns either the reservation or
// the reply to give.
func (a *Server) register(ctx context.Context, run reconcile.RunID) (reconcile.Reservation, *hookapi.PrologReply, error) {
	j, err := a.Jobs.GetJob(ctx, run.JobID)
	a.observeSlurm("get_job", err)
	if err != nil {
		return reconcile.Reservation{}, &hookapi.PrologReply{Outcome: hookapi.OutcomeWaiting,
			Reason: fmt.Sprintf("cannot read job %d from slurmrestd: %v", run.JobID, err)}, nil
	}
	req, err := a.JobRequest(j)
	if errors.Is(err, request.ErrNotARequest) {
		return reconcile.Reservation{}, &hookapi.PrologReply{Outcome: hookapi.OutcomeNone, Reason: "the job carries no Juice request"}, nil
	}
	if err != nil {
		return reconcile.Reservation{}, &hookapi.PrologReply{Outcome: hookapi.OutcomeFailed, Reason: err.Error()}, nil
	}
	// An array's element may have been reserved ahead, before slurmctld gave it this job id: EnsureRun binds it.
	if j.Array != nil && j.Array.HasTask {
		run.ArrayJobID, run.ArrayTaskID = j.Array.JobID, j.Array.TaskID
	}
	res, created, err := a.Store.EnsureRun(ctx, reconcile.NewReservation{Run: run, Request: req, UserName: j.UserName,
		Account: j.Account, Partition: j.Partition, JobState: string(j.State), JobReason: j.StateReason, Reason: "registered by the prolog: " + req.Describe()})
	if created {
		a.Log.Info("prolog registered a run the poller had not seen", "job", run.JobID, "run", run.Run, "request", req.String())
	}
	return res, nil, err
}

func (a *Server) epilog(w http.ResponseWriter, r *http.Request) {
	var in hookapi.EpilogRequest
	if !decode(w, r, &in) {
		return
	}
	run := reconcile.RunID{Cluster: in.Cluster, JobID: in.JobID, Run: in.Run}
	if in.Cluster != a.Store.Cluster() {
		http.Error(w, fmt.Sprintf("bad request: this controller serves cluster %q, not %q", a.Store.Cluster(), in.Cluster), http.StatusBadRequest)
		return
	}
	reason := fmt.Sprintf("job %d run %d finished (epilog", in.JobID, in.Run)
	if in.ExitCode != "" {
		reason += ", exit code " + in.ExitCode
	}
	reason += ")"
	// The leader's reconciler hears of it through NOTIFY.
	_, err := a.Store.UnwantRun(r.Context(), run, reason, true)
	if errors.Is(err, reconcile.ErrNotFound) {
		reply(w, hookapi.EpilogReply{Outcome: hookapi.OutcomeNone, Reason: "no reservation for this run"})
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	res, err := a.Store.ForRun(r.Context(), run)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := res
	if a.othersWait(r.Context(), res) {
		out = a.wait(r.Context(), res, in.WaitSeconds, func(r *reconcile.Reservation) bool { return r.Status.State.Final() })
	}
	rep := hookapi.EpilogReply{Outcome: hookapi.OutcomeWaiting, State: string(out.Status.State), Reason: out.Status.Reason}
	if out.Status.State.Final() {
		rep.Outcome = hookapi.OutcomeReleased
	}
	reply(w, rep)
}

// maxWait is the longest wait of one call.
// othersWait reports whether the epilog of r's run waits for its release: only where another run waits for GPUs
// in its pool. Without licenses the job's nodes stay COMPLETING meanwhile, so Slurm's next job there starts once the
// GPUs are back instead of waiting for them in its prolog. Where nobody waits, the wait would only hold the job
// (the burst's last wave): the release goes on all the same, the reconciler having heard of the end. Slurm gives a
// job's licenses back at its end, before the epilog, so with licenses on nothing in Slurm waits for it either.
func (a *Server) othersWait(ctx context.Context, r reconcile.Reservation) bool {
	if r.Status.State.Final() {
		return false
	}
	waits, err := a.Store.PoolWaits(ctx, r.Request.Pool, r.ID)
	if err != nil {
		a.Log.Error(err, "epilog: waiting for the release, as if another run waited for the pool", "reservation", r.ID)
		return true
	}
	return waits
}

func (a *Server) maxWait() time.Duration {
	if a.MaxWait == 0 {
		return 30 * time.Second
	}
	return a.MaxWait
}

// wait returns the reservation as soon as done holds for it, or when the wait is over. It wakes on NOTIFY and
// re-reads the row every Recheck in case a notification was lost.
func (a *Server) wait(ctx context.Context, r reconcile.Reservation, seconds float64, done func(*reconcile.Reservation) bool) reconcile.Reservation {
	if done(&r) {
		return r
	}
	max := a.maxWait()
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
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, hookapi.MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "bad request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any) {
	if rec, ok := w.(*outcomeRecorder); ok {
		switch v := v.(type) {
		case hookapi.PrologReply:
			rec.outcome = v.Outcome
		case hookapi.EpilogReply:
			rec.outcome = v.Outcome
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// mineRuns bounds one /v1/mine answer.
const mineRuns = 50

// mine answers a user's own runs: the caller proves who it is with a MUNGE credential (munge -n, decoded by the
// local munged: one use only, within its time to live), so a user needs neither the hook secret nor database
// credentials, and sees only the runs whose job they own.
func (a *Server) mine(w http.ResponseWriter, r *http.Request) {
	cred, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Munge ")
	if !ok || a.Unmunge == "" {
		w.Header().Set("WWW-Authenticate", `Munge realm="juice-slurm"`)
		http.Error(w, "unauthorized: send a MUNGE credential (munge -n) as 'Authorization: Munge <credential>'", http.StatusUnauthorized)
		return
	}
	// One peer's calls at once are capped as the hooks' are: each costs an unmunge.
	leave, ok := a.enterWait(w, r)
	if !ok {
		return
	}
	defer leave()
	name, err := a.identify(r.Context(), cred)
	if err != nil {
		a.Log.Info("a /v1/mine credential was refused", "error", err.Error())
		http.Error(w, "unauthorized: "+err.Error(), http.StatusUnauthorized)
		return
	}
	rs, err := a.Store.ForUser(r.Context(), name, mineRuns)
	if err != nil {
		a.Log.Error(err, "list a user's runs", "user", name)
		http.Error(w, "cannot read the runs", http.StatusServiceUnavailable)
		return
	}
	out := hookapi.MineReply{User: name, Runs: []hookapi.RunView{}}
	for _, res := range rs {
		v := hookapi.RunView{JobID: res.Run.JobID, Run: res.Run.Run, Request: res.Request.String(), State: string(res.Status.State),
			Reason: res.Status.Reason, JobState: res.Spec.JobState, Created: res.CreatedAt, Partition: res.Partition}
		if res.Run.Element() {
			task := res.Run.ArrayTaskID
			v.ArrayJobID, v.ArrayTaskID = res.Run.ArrayJobID, &task
		}
		ts, err := a.Store.Events(r.Context(), res.ID)
		if err != nil {
			a.Log.Error(err, "read a run's events", "job", res.Run.JobID, "run", res.Run.Run)
			http.Error(w, "cannot read the runs", http.StatusServiceUnavailable)
			return
		}
		for _, t := range ts {
			v.Events = append(v.Events, hookapi.EventView{At: t.At, From: string(t.From), To: string(t.To), Event: string(t.Event), Reason: t.Reason})
		}
		out.Runs = append(out.Runs, v)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// identify decodes a MUNGE credential with unmunge and returns the name of the user who made it. munged refuses
// a credential it has decoded before, an expired one, and one of another MUNGE key.
func (a *Server) identify(ctx context.Context, cred string) (string, error) {
	if len(cred) > 4096 || strings.TrimSpace(cred) == "" {
		return "", errors.New("not a MUNGE credential")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Unmunge)
	cmd.Stdin = strings.NewReader(strings.TrimSpace(cred) + "\n")
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("MUNGE refused the credential (%v)", err)
	}
	var status, uid string
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "STATUS":
			status = strings.TrimSpace(v)
		case "UID":
			// "root (0)"
			if i, j := strings.LastIndex(v, "("), strings.LastIndex(v, ")"); i >= 0 && j > i {
				uid = v[i+1 : j]
			}
		}
	}
	if !strings.HasPrefix(status, "Success") || uid == "" {
		return "", fmt.Errorf("MUNGE says %q", status)
	}
	u, err := user.LookupId(uid)
	if err != nil {
		return "", fmt.Errorf("uid %s: %w", uid, err)
	}
	return u.Username, nil
}

// The observe methods count in Metrics, when set.

func (a *Server) observeHook(hook, outcome string) {
	if a.Metrics != nil {
		a.Metrics.ObserveHook(hook, outcome)
	}
}

func (a *Server) observeHookRefused(limit string) {
	if a.Metrics != nil {
		a.Metrics.ObserveHookRefused(limit)
	}
}

func (a *Server) observePrologWait(d time.Duration, outcome string) {
	if a.Metrics != nil {
		a.Metrics.ObservePrologWait(d, outcome)
	}
}

func (a *Server) observeSlurm(op string, err error) {
	if a.Metrics != nil {
		a.Metrics.ObserveSlurm(op, err)
	}
}
