package juiceapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/internal/origin"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
)

// HTTPConfig configures HTTPClient. Zero values take the documented defaults.
type HTTPConfig struct {
	// BaseURL of the controller, e.g. "https://controller.juicelabs.co" or "http://127.0.0.1:7070".
	BaseURL string
	// TokenFile holds the M2M token (mode 0600 or stricter). It is re-read when it changes.
	TokenFile string
	// Timeout bounds one attempt (connect, send, answer). Default 10s.
	Timeout time.Duration
	// MaxAttempts bounds the tries of one call, the first included. Default 6. The caller's context
	// bounds them too.
	MaxAttempts int
	// InitialBackoff is the wait before the second attempt; it doubles up to MaxBackoff, with jitter.
	// Defaults 100ms and 3s.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Version is sent as the client version in session requests. Default "juice-slurm".
	Version string
	// HTTPClient, if set, is used as is (its Timeout should be zero: attempts have their own).
	HTTPClient *http.Client
	// Log receives retries at V(1). Default: discard.
	Log logr.Logger
	// IdempotentRequests says the controller honours Idempotency-Key (juice-sim does), so a POST whose
	// answer was lost may be retried like a GET. Off, a POST is sent once and the caller looks for the
	// session by its key before asking again: the legacy controller books a second session for a repeat.
	IdempotentRequests bool
	// Pools maps the pool names users type to the controller's pool ids (the legacy controller knows pools
	// by UUID only, has no listing, and queues a request for a name that never runs). When set, a name not
	// in it is refused. When empty, names are looked up with GET /v1/pools (the simulator); a controller
	// without that route accepts UUIDs only.
	Pools map[string]string
}

// Defaults of HTTPConfig.
const (
	DefaultTimeout        = 10 * time.Second
	DefaultMaxAttempts    = 6
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 3 * time.Second
)

// HTTPClient implements Client over the legacy REST model.
type HTTPClient struct {
	base     *url.URL
	tokens   *secretfile.File
	hc       *http.Client
	log      logr.Logger
	timeout  time.Duration
	retry    backoff.Policy
	attempts int
	version  string

	idempotent bool
	pools      map[string]string
	poolMu     sync.Mutex
	poolSeen   map[string]string // GET /v1/pools: name -> id
	poolAt     time.Time
	fitMu      sync.Mutex
	fitSeen    map[string]fitView  // pool id -> its agents, for the check before a request
	fitFlight  map[string]*fitCall // pool id -> the listing under way, which later checks share
}

var _ Client = (*HTTPClient)(nil)

// NewHTTPClient checks the configuration and reads the token file once, so a bad file fails at
// start-up rather than at the first request.
func NewHTTPClient(cfg HTTPConfig) (*HTTPClient, error) {
	base, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("juice controller URL %q: want http(s)://host[:port][/path]", cfg.BaseURL)
	}
	if cfg.TokenFile == "" {
		return nil, errors.New("juice client: no token file given")
	}
	tokens := secretfile.New(cfg.TokenFile, nil)
	if _, err := tokens.Value(); err != nil {
		return nil, fmt.Errorf("juice client: M2M token: %w", err)
	}
	c := &HTTPClient{
		base:     base,
		tokens:   tokens,
		hc:       cfg.HTTPClient,
		log:      cfg.Log,
		timeout:  cfg.Timeout,
		retry:    backoff.Policy{Base: cfg.InitialBackoff, Max: cfg.MaxBackoff},
		attempts: cfg.MaxAttempts,
		version:  cfg.Version,
		pools:    cfg.Pools, idempotent: cfg.IdempotentRequests,
	}
	if c.log.GetSink() == nil {
		c.log = logr.Discard()
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 32 // one controller host: keep connections instead of redialling
		// The bearer token never follows a redirect to another host, port or scheme.
		c.hc = &http.Client{Transport: tr, CheckRedirect: origin.CheckRedirect}
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	if c.attempts <= 0 {
		c.attempts = DefaultMaxAttempts
	}
	if c.retry.Base <= 0 {
		c.retry.Base = DefaultInitialBackoff
	}
	if c.retry.Max <= 0 {
		c.retry.Max = DefaultMaxBackoff
	}
	if c.version == "" {
		c.version = "juice-slurm"
	}
	if base.Scheme == "http" && !isLoopback(base.Hostname()) {
		c.log.Info("WARNING: the M2M token is sent over plain http", "url", base.Redacted())
	}
	return c, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RequestSession posts the requirements with the key as Idempotency-Key. Retrying the POST is safe
// only because of that key: a controller that honours it answers a repeat with the same id.
func (c *HTTPClient) RequestSession(ctx context.Context, key uuid.UUID, req SessionRequest) (string, error) {
	if err := validateRequest(req); err != nil {
		return "", fmt.Errorf("request session in pool %q: %w", req.PoolID,
			&APIError{Method: http.MethodPost, Path: "/v1/request/session", Kind: ErrInvalidRequest, Err: err})
	}
	if key == uuid.Nil {
		return "", fmt.Errorf("request session in pool %q: the idempotency key is the nil UUID", req.PoolID)
	}
	poolID, err := c.poolID(ctx, req.PoolID)
	if err != nil {
		return "", fmt.Errorf("request session in pool %q: %w", req.PoolID, err)
	}
	// Never send what no agent can ever hold: the legacy controller accepts it and then exits, again at each
	// restart while the session is queued. Its listing shows one page of 20 active agents, so a full page
	// proves nothing and the request goes on. The pool's shape changes seldom: a listing younger than fitRefresh
	// that says the request fits serves; one that says it does not is taken again before refusing.
	if why, listed, err := c.canEverFit(ctx, poolID, req, false); err != nil || why != "" {
		if err == nil && !listed {
			why, _, err = c.canEverFit(ctx, poolID, req, true)
		}
		if errors.Is(err, ErrNotFound) {
			return "", &APIError{Method: http.MethodPost, Path: "/v1/request/session", Kind: ErrNoCapacity,
				Message: fmt.Sprintf("not sent: pool %q does not exist", req.PoolID), Err: err}
		}
		if err != nil {
			return "", fmt.Errorf("request session in pool %q: check the pool's agents first: %w", req.PoolID, err)
		}
		if why != "" {
			return "", &APIError{Method: http.MethodPost, Path: "/v1/request/session", Kind: ErrNoCapacity,
				Message: fmt.Sprintf("not sent: pool %q: %s", req.PoolID, why)}
		}
	}
	wire := req.Requirements(TaggedVersion(c.version, key))
	wire.PoolID = poolID
	body, err := json.Marshal(wire)
	if err != nil {
		return "", fmt.Errorf("request session in pool %q: %w", req.PoolID, err)
	}
	var id string
	err = c.do(ctx, call{
		method: http.MethodPost, path: "/v1/request/session", body: body, key: key.String(), once: !c.idempotent,
		decode: func(ct string, b []byte) error {
			// The legacy answer is the bare id as text/plain. Accept any id-like text (the
			// production API may not use UUIDs), but not an HTML page or a JSON document.
			id = strings.TrimSpace(string(b))
			if err := checkID(id); err != nil || strings.ContainsAny(id, " \t\n\"{}<>") || len(id) > 128 {
				return fmt.Errorf("session id %q does not look like an id", truncate(id, 80))
			}
			return nil
		},
	})
	if err != nil {
		return "", fmt.Errorf("request session in pool %q (key %s): %w", req.PoolID, key, err)
	}
	return id, nil
}

func validateRequest(req SessionRequest) error {
	switch {
	case req.PoolID == "":
		return errors.New("no pool given")
	case req.GPUs < 1:
		return fmt.Errorf("GPU count %d: want at least 1", req.GPUs)
	case req.GPUs > 1024:
		return fmt.Errorf("GPU count %d: too many", req.GPUs)
	}
	return nil
}

// GetSession fetches one session.
func (c *HTTPClient) GetSession(ctx context.Context, id string) (*Session, error) {
	if err := checkID(id); err != nil {
		return nil, fmt.Errorf("get session: %w", err)
	}
	var s Session
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/session/" + url.PathEscape(id), decode: jsonInto(&s)}); err != nil {
		return nil, fmt.Errorf("get session %s: %w", id, err)
	}
	return &s, nil
}

// CancelSession deletes a session that has not ended. It reads the session before each DELETE, and sends each
// DELETE once: the legacy controller reopens a closed session it is asked to cancel (and its agent then exits),
// so a DELETE whose answer was lost is never repeated blind; the next read tells whether it worked.
func (c *HTTPClient) CancelSession(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return fmt.Errorf("cancel session: %w", err)
	}
	for attempt := 1; ; attempt++ {
		s, err := c.GetSession(ctx, id)
		if err != nil {
			return fmt.Errorf("cancel session: %w", err)
		}
		if s.Ended() {
			return nil
		}
		// An assigned session may not be on its agent yet: cancelling it reaches the agent as a cancel of a session
		// it never took, and the real agent exits on that (seen in the legacy chaos run). So it is cancelled once
		// active. A queued one (the legacy controller reads it back empty) is cancelled at once: no agent has it,
		// and left queued it would take capacity once placed (the legacy controller never gives VRAM back). What
		// remains is the scheduler assigning it between this read and the DELETE, a window of one round trip.
		if s.State == StateAssigned {
			return &APIError{Method: http.MethodDelete, Path: "/v1/session/" + id, Kind: ErrNotYet,
				Message: fmt.Sprintf("session %s is %s: cancelled once its agent has taken it", id, orEmpty(s.State))}
		}
		err = c.do(ctx, call{method: http.MethodDelete, path: "/v1/session/" + url.PathEscape(id), once: true,
			decode: func(ct string, b []byte) error {
				var msg string // the legacy answer is a JSON string, "Session <id> cancelled"
				if json.Unmarshal(b, &msg) != nil && len(bytes.TrimSpace(b)) != 0 {
					return fmt.Errorf("answer %q is not a JSON string", truncate(string(b), 80))
				}
				return nil
			}})
		var ae *APIError
		if errors.As(err, &ae) && alreadyEnded(ae.Message) {
			return nil
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrUnavailable) || attempt >= c.attempts || ctx.Err() != nil {
			return fmt.Errorf("cancel session %s: %w", id, err)
		}
		t := time.NewTimer(c.retry.Delay(attempt - 1))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

func orEmpty(state string) string {
	if state == "" {
		return "read back empty (queued)"
	}
	return state
}

// alreadyEnded recognises a controller that refuses to cancel an ended session.
func alreadyEnded(text string) bool {
	lower := strings.ToLower(text)
	return strings.Contains(lower, "already closed") || strings.Contains(lower, "already cancel")
}

// ListAgents lists a pool's agents (all agents when pool is empty).
func (c *HTTPClient) ListAgents(ctx context.Context, pool string) ([]Agent, error) {
	poolID := ""
	if pool != "" {
		var err error
		if poolID, err = c.poolID(ctx, pool); err != nil {
			return nil, fmt.Errorf("list agents of pool %q: %w", pool, err)
		}
	}
	agents, err := c.listAgents(ctx, poolID)
	if err != nil {
		return nil, fmt.Errorf("list agents of pool %q: %w", pool, err)
	}
	return agents, nil
}

func (c *HTTPClient) listAgents(ctx context.Context, poolID string) ([]Agent, error) {
	var agents []Agent
	if err := c.do(ctx, call{method: http.MethodGet, path: agentsPath(poolID), decode: jsonInto(&agents)}); err != nil {
		return nil, err
	}
	return agents, nil
}

// GetAgent reads one agent with its sessions.
func (c *HTTPClient) GetAgent(ctx context.Context, id string) (*Agent, error) {
	if err := checkID(id); err != nil {
		return nil, fmt.Errorf("get agent: %w", err)
	}
	var a Agent
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/agent/" + url.PathEscape(id), decode: jsonInto(&a)}); err != nil {
		return nil, fmt.Errorf("get agent %s: %w", id, err)
	}
	return &a, nil
}

// fitRefresh is how long a listing of a pool's agents answers "can this request ever fit?" for later requests.
const fitRefresh = 30 * time.Second

// fitView is what canEverFit keeps of a pool's agent listing: the agents without their sessions.
type fitView struct {
	agents []Agent
	at     time.Time
}

// fitCall is one listing of a pool's agents for the fit check, shared by every check that needs it meanwhile.
type fitCall struct {
	done chan struct{}
	v    fitView
	err  error
}

// canEverFit says why req can never be held by the pool's agents ("" when it can, or when the listing is a full
// legacy page and cannot tell), from a listing younger than fitRefresh unless fresh is set; listed says the pool
// was listed for this answer.
//
// One listing of a pool at a time: the workers that find the view stale together share the one under way (a
// pool of 12,500 agents lists in tens of MiB, which every worker decoding its own copy multiplied). A fresh check
// never takes a listing begun before it asked.
func (c *HTTPClient) canEverFit(ctx context.Context, poolID string, req SessionRequest, fresh bool) (why string, listed bool, err error) {
	c.fitMu.Lock()
	v, ok := c.fitSeen[poolID]
	if listed = !ok || fresh || time.Since(v.at) >= fitRefresh; listed {
		call := c.fitFlight[poolID]
		if call == nil || fresh {
			call = &fitCall{done: make(chan struct{})}
			if !fresh {
				if c.fitFlight == nil {
					c.fitFlight = map[string]*fitCall{}
				}
				c.fitFlight[poolID] = call
			}
			c.fitMu.Unlock()
			c.listFit(ctx, poolID, call, fresh)
		} else {
			c.fitMu.Unlock()
			select {
			case <-call.done:
			case <-ctx.Done():
				return "", true, ctx.Err()
			}
			if ctxErr(call.err) {
				// The check that listed gave up (its own time ran out, or it was stopped), not this one: list anew.
				call = &fitCall{done: make(chan struct{})}
				c.listFit(ctx, poolID, call, true)
			}
		}
		if call.err != nil {
			return "", true, call.err
		}
		v = call.v
	} else {
		c.fitMu.Unlock()
	}
	if len(v.agents) >= 20 {
		return "", listed, nil
	}
	return CanEverFit(v.agents, req), listed, nil
}

// ctxErr reports whether err is a context's end.
func ctxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// listFit makes call: lists the pool's agents, keeps them (without their sessions) as the pool's view, and wakes
// the checks waiting on it.
func (c *HTTPClient) listFit(ctx context.Context, poolID string, call *fitCall, fresh bool) {
	defer close(call.done)
	agents, err := c.listAgentsWithoutSessions(ctx, poolID)
	c.fitMu.Lock()
	defer c.fitMu.Unlock()
	if !fresh && c.fitFlight[poolID] == call {
		delete(c.fitFlight, poolID)
	}
	if call.err = err; err != nil {
		return
	}
	call.v = fitView{agents: agents, at: time.Now()}
	if c.fitSeen == nil {
		c.fitSeen = map[string]fitView{}
	}
	c.fitSeen[poolID] = call.v
}

// listAgentsWithoutSessions lists a pool's agents as listAgents does, but never makes their sessions: the decoder
// steps over them (the fit check looks at agents alone, and a big pool's sessions are most of the answer).
func (c *HTTPClient) listAgentsWithoutSessions(ctx context.Context, poolID string) ([]Agent, error) {
	var listed []struct {
		Agent
		Sessions skipped `json:"sessions"`
	}
	if err := c.do(ctx, call{method: http.MethodGet, path: agentsPath(poolID), decode: jsonInto(&listed)}); err != nil {
		return nil, err
	}
	agents := make([]Agent, len(listed))
	for i := range listed {
		agents[i] = listed[i].Agent
	}
	return agents, nil
}

// agentsPath is the listing of a pool's agents (every agent's when poolID is empty).
func agentsPath(poolID string) string {
	if poolID == "" {
		return "/v1/agents"
	}
	return "/v1/agents?pool_id=" + url.QueryEscape(poolID)
}

// skipped is a JSON value read over and kept nowhere.
type skipped struct{}

func (*skipped) UnmarshalJSON([]byte) error { return nil }

// poolRefresh is how long a pool listing is trusted before a name it lacks is looked up again.
const poolRefresh = time.Minute

// poolID resolves the name a user typed to the controller's pool id (see HTTPConfig.Pools).
func (c *HTTPClient) poolID(ctx context.Context, name string) (string, error) {
	if len(c.pools) > 0 {
		if id, ok := c.pools[name]; ok {
			return id, nil
		}
		return "", &APIError{Method: "RESOLVE", Path: "pool " + name, Kind: ErrNoCapacity,
			Message: fmt.Sprintf("pool %q is not one of the configured pools (%s)", name, strings.Join(slices.Sorted(maps.Keys(c.pools)), ", "))}
	}
	c.poolMu.Lock()
	defer c.poolMu.Unlock()
	if id, ok := c.poolSeen[name]; ok {
		return id, nil
	}
	if c.poolSeen == nil || time.Since(c.poolAt) > poolRefresh {
		var pools []struct {
			ID   string `json:"id"`
			Name string `json:"name"`
		}
		err := c.do(ctx, call{method: http.MethodGet, path: "/v1/pools", decode: jsonInto(&pools)})
		var ae *APIError
		switch {
		case errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound:
			// No listing (the legacy controller): only an id can be sent as it is.
			if _, perr := uuid.Parse(name); perr == nil {
				return name, nil
			}
			return "", &APIError{Method: "RESOLVE", Path: "pool " + name, Kind: ErrNoCapacity,
				Message: fmt.Sprintf("pool %q: the Juice Controller has no pool listing and knows pools by id only; map the name to its id in the controller's configuration (--juice-pools %s=<id>)", name, name)}
		case err != nil:
			return "", fmt.Errorf("look up pool %q: %w", name, err)
		}
		c.poolSeen, c.poolAt = map[string]string{}, time.Now()
		for _, p := range pools {
			c.poolSeen[p.Name] = p.ID
		}
		if id, ok := c.poolSeen[name]; ok {
			return id, nil
		}
	}
	return name, nil // unknown to the listing: the controller's own answer says so
}

// Status calls GET /v1/status, the documented token check.
func (c *HTTPClient) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/status", decode: jsonInto(&st)}); err != nil {
		return nil, fmt.Errorf("juice controller status: %w", err)
	}
	return &st, nil
}

func jsonInto(v any) func(string, []byte) error {
	return func(_ string, b []byte) error { return json.Unmarshal(b, v) }
}

func checkID(id string) error {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return fmt.Errorf("invalid session id %q", truncate(id, 80))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
