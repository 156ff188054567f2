package slurmrest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"

	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/internal/origin"
	"github.com/juice-slurm/juice-slurm/slurmrest/internal/wire"
)

// Config configures a Client.
type Config struct {
	// BaseURL of slurmrestd: http://host:port, https://host:port or unix:///path/to/socket.
	BaseURL string
	// UserName is sent as X-SLURM-USER-NAME (the token's user). Not needed over a unix socket with
	// rest_auth/local.
	UserName string
	// TokenSource gives the JWT sent as X-SLURM-USER-TOKEN; nil sends no token (rest_auth/local).
	TokenSource TokenSource
	// Version forces an API version (e.g. "v0.0.38"); "" negotiates the newest one the server offers.
	Version string
	// HTTPClient is used for the requests; nil builds one (with a unix-socket dialer for unix://).
	HTTPClient *http.Client
	// Logger gets one V(1) line per request and a line per retry; the zero value discards.
	Logger logr.Logger
	// Retry bounds the retries of connection errors and transient 5xx replies.
	Retry RetryConfig
	// RequestTimeout bounds one HTTP exchange (default 60 s); the caller's context bounds the whole call.
	RequestTimeout time.Duration
	// ClockMargin is subtracted from the client's clock to make JobList.LastUpdate on versions whose
	// replies carry no server time (v0.0.3x); default 2 s.
	ClockMargin time.Duration
}

// RetryConfig bounds retries. Zero values take the defaults.
type RetryConfig struct {
	// MaxAttempts is the number of tries of one call, the first included (default 4; 1 = no retry).
	MaxAttempts int
	// InitialBackoff before the first retry (default 200 ms); doubled each time, with jitter.
	InitialBackoff time.Duration
	// MaxBackoff caps one wait (default 5 s).
	MaxBackoff time.Duration
}

// Client talks to one slurmrestd. It is safe for concurrent use.
type Client struct {
	cfg     Config
	base    *url.URL
	http    *http.Client
	log     logr.Logger
	retry   RetryConfig
	margin  time.Duration
	timeout time.Duration

	mu      sync.Mutex
	ad      adapter
	ver     string
	release string // Slurm release seen in a reply's meta
}

// New checks the configuration and returns a client. It does not contact the server: the API version
// is negotiated on the first call (or by Negotiate).
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		return nil, errors.New("slurmrest: BaseURL is empty")
	}
	u, err := url.Parse(cfg.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("slurmrest: BaseURL: %w", err)
	}
	hc := cfg.HTTPClient
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("slurmrest: BaseURL %q has no host", cfg.BaseURL)
		}
		if hc == nil {
			hc = &http.Client{CheckRedirect: origin.CheckRedirect, Transport: &http.Transport{
				Proxy:               nil, // slurmrestd is local infrastructure: never go through a proxy
				DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
				MaxIdleConnsPerHost: 4,
				IdleConnTimeout:     90 * time.Second,
			}}
		}
	case "unix":
		sock := u.Path
		if sock == "" {
			sock = u.Opaque
		}
		if sock == "" {
			return nil, fmt.Errorf("slurmrest: BaseURL %q has no socket path", cfg.BaseURL)
		}
		if hc == nil {
			d := &net.Dialer{Timeout: 10 * time.Second}
			hc = &http.Client{CheckRedirect: origin.CheckRedirect, Transport: &http.Transport{
				Proxy: nil,
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					return d.DialContext(ctx, "unix", sock)
				},
				MaxIdleConnsPerHost: 4,
			}}
		}
		u = &url.URL{Scheme: "http", Host: "localhost"}
	default:
		return nil, fmt.Errorf("slurmrest: BaseURL %q: scheme must be http, https or unix", cfg.BaseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	c := &Client{
		cfg:     cfg,
		base:    u,
		http:    hc,
		log:     cfg.Logger,
		retry:   cfg.Retry,
		margin:  cfg.ClockMargin,
		timeout: cfg.RequestTimeout,
	}
	if c.retry.MaxAttempts <= 0 {
		c.retry.MaxAttempts = 4
	}
	if c.retry.InitialBackoff <= 0 {
		c.retry.InitialBackoff = 200 * time.Millisecond
	}
	if c.retry.MaxBackoff <= 0 {
		c.retry.MaxBackoff = 5 * time.Second
	}
	if c.margin <= 0 {
		c.margin = 2 * time.Second
	}
	if c.timeout <= 0 {
		c.timeout = 60 * time.Second
	}
	if cfg.Version != "" {
		ad, err := adapterFor(cfg.Version)
		if err != nil {
			return nil, err
		}
		c.ad, c.ver = ad, cfg.Version
	}
	return c, nil
}

// Version returns the API version in use ("v0.0.38", ...), or "" before negotiation.
func (c *Client) Version() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ver
}

// SlurmRelease returns the Slurm release the server reported (e.g. "24.11.5"), known after a Ping.
func (c *Client) SlurmRelease() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.release
}

func (c *Client) setRelease(r string) {
	if r == "" {
		return
	}
	c.mu.Lock()
	c.release = r
	c.mu.Unlock()
}

// Ping checks that slurmrestd answers and that it reaches a responding slurmctld.
func (c *Client) Ping(ctx context.Context) error {
	ad, err := c.adapter(ctx)
	if err != nil {
		return err
	}
	return ad.ping(ctx, c)
}

// ListJobs lists the jobs slurmctld knows. With a non-zero since (the LastUpdate of the previous
// listing), it returns Unchanged and no jobs when no job changed since then: keep the last snapshot.
func (c *Client) ListJobs(ctx context.Context, since time.Time) (JobList, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return JobList{}, err
	}
	return ad.listJobs(ctx, c, since)
}

// GetJob returns one job; an unknown or aged-out job gives an error that matches ErrNotFound.
func (c *Client) GetJob(ctx context.Context, id uint32) (*Job, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return nil, err
	}
	return ad.getJob(ctx, c, id)
}

// UpdateJob changes a job's comment, admin comment, hold, or makes it eligible now.
func (c *Client) UpdateJob(ctx context.Context, id uint32, u JobUpdate) error {
	if u.Comment == nil && u.AdminComment == nil && u.Hold == nil && !u.BeginNow {
		return nil
	}
	ad, err := c.adapter(ctx)
	if err != nil {
		return err
	}
	return ad.updateJob(ctx, c, id, u)
}

// CancelJob cancels a job (SIGKILL to all its steps). Cancelling a job that has already ended is not
// an error.
func (c *Client) CancelJob(ctx context.Context, id uint32) error {
	ad, err := c.adapter(ctx)
	if err != nil {
		return err
	}
	return ad.cancelJob(ctx, c, id)
}

// SubmitJob submits a batch job and returns its id.
func (c *Client) SubmitJob(ctx context.Context, s JobSubmission) (uint32, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(s.Script) == "" {
		return 0, errors.New("slurmrest: SubmitJob: empty script")
	}
	return ad.submitJob(ctx, c, s)
}

// RequeueJob requeues a batch job (it goes back to PENDING with its restart count + 1). Only
// v0.0.45+ has a requeue endpoint; older versions return ErrUnsupported (use `scontrol requeue`).
func (c *Client) RequeueJob(ctx context.Context, id uint32) error {
	ad, err := c.adapter(ctx)
	if err != nil {
		return err
	}
	return ad.requeueJob(ctx, c, id)
}

// CanRequeue reports whether RequeueJob works with the negotiated version.
func (c *Client) CanRequeue(ctx context.Context) (bool, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return false, err
	}
	return ad.canRequeue(), nil
}

// JobStates returns the state of each job asked for that slurmctld still knows (an unknown or aged-out id is
// simply absent), with one cheap job-state RPC per batch of ids instead of a listing of the whole queue. Asking
// for an array's job id returns all its elements. Only v0.0.40+ has it (CanTrackStates); older versions return
// ErrUnsupported.
func (c *Client) JobStates(ctx context.Context, ids []uint32) ([]JobStatus, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return ad.jobStates(ctx, c, ids)
}

// AllJobStates returns the state of every job slurmctld knows, one small record each (about 80 bytes of JSON, against
// some 8 KB per job in a listing on v0.0.45): new job ids show here long before a paced listing would show them.
// Only v0.0.40+ (CanTrackStates).
func (c *Client) AllJobStates(ctx context.Context) ([]JobStatus, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return nil, err
	}
	return ad.jobStates(ctx, c, nil)
}

// CanTrackStates reports whether JobStates works with the negotiated version (v0.0.40 and newer: Slurm 23.11+).
func (c *Client) CanTrackStates(ctx context.Context) (bool, error) {
	ad, err := c.adapter(ctx)
	if err != nil {
		return false, err
	}
	return ad.canTrackStates(), nil
}

// ---- transport ------------------------------------------------------------------------------------

type request struct {
	method string
	path   string // below the base URL, with the query
	body   any
	// idempotent requests are retried on transient failures; others only when the connection was
	// refused (nothing reached the server).
	idempotent bool
	version    string
}

type response struct {
	status int
	body   []byte
}

// do sends a request with retries. It returns the reply for 2xx and 304; any other status becomes an
// *APIError (after retries when transient).
func (c *Client) do(ctx context.Context, r request) (*response, error) {
	var payload []byte
	if r.body != nil {
		var err error
		if payload, err = json.Marshal(r.body); err != nil {
			return nil, fmt.Errorf("slurmrest: encoding %s %s: %w", r.method, r.path, err)
		}
	}
	wait := backoff.Policy{Base: c.retry.InitialBackoff, Max: c.retry.MaxBackoff}
	for attempt := 1; ; attempt++ {
		resp, err := c.once(ctx, r, payload)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		retry := false
		var apiErr *APIError
		switch {
		case errors.As(err, &apiErr):
			retry = r.idempotent && apiErr.transient()
			if apiErr.unauthorized() {
				if f, ok := c.cfg.TokenSource.(*FileTokenSource); ok {
					f.Invalidate()
				}
			}
		case errors.Is(err, ErrUnauthorized):
			retry = false
		default: // transport error
			retry = r.idempotent || isConnRefused(err)
		}
		if !retry || attempt >= c.retry.MaxAttempts {
			return nil, err
		}
		d := wait.Delay(attempt - 1)
		c.log.V(1).Info("slurmrestd request failed, retrying", "method", r.method, "path", r.path,
			"attempt", attempt, "wait", d, "error", err.Error())
		if backoff.SleepFor(ctx, d) != nil {
			return nil, err
		}
	}
}

func (c *Client) once(ctx context.Context, r request, payload []byte) (*response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base.String()+r.path, body)
	if err != nil {
		return nil, fmt.Errorf("slurmrest: %s %s: %w", r.method, r.path, err)
	}
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.cfg.UserName != "" {
		req.Header.Set("X-SLURM-USER-NAME", c.cfg.UserName)
	}
	if c.cfg.TokenSource != nil {
		tok, err := c.cfg.TokenSource.Token(ctx)
		if err != nil {
			return nil, err
		}
		if exp, ok := JWTExpiry(tok); ok && time.Now().After(exp) {
			return nil, fmt.Errorf("slurmrest: token expired at %s: %w", exp.UTC().Format(time.RFC3339), ErrUnauthorized)
		}
		req.Header.Set("X-SLURM-USER-TOKEN", tok)
	}
	start := time.Now()
	hr, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("slurmrest: %s %s: %w", r.method, r.path, err)
	}
	defer hr.Body.Close()
	b, err := readBody(hr)
	if err != nil {
		return nil, fmt.Errorf("slurmrest: %s %s: reading reply: %w", r.method, r.path, err)
	}
	c.log.V(1).Info("slurmrestd", "method", r.method, "path", r.path, "status", hr.StatusCode,
		"bytes", len(b), "elapsed", time.Since(start))
	if hr.StatusCode/100 == 2 || hr.StatusCode == http.StatusNotModified {
		return &response{status: hr.StatusCode, body: b}, nil
	}
	return nil, newAPIError(r, hr.StatusCode, b, nil)
}

// newAPIError builds the error for a failed reply; errs are the reply's errors[] when the caller has
// decoded them already, else they are read from the body.
func newAPIError(r request, status int, body []byte, errs []wire.Error) *APIError {
	e := &APIError{Method: r.method, Path: r.path, StatusCode: status, Version: r.version}
	if errs == nil && len(body) > 0 {
		var generic struct {
			Errors []wire.Error `json:"errors"`
		}
		if json.Unmarshal(body, &generic) == nil {
			errs = generic.Errors
			e.jsonBody = true
		} else {
			s := strings.TrimSpace(string(body))
			if len(s) > 200 {
				s = s[:200] + "..."
			}
			e.Body = s
		}
	}
	for i := range errs {
		e.Errors = append(e.Errors, SlurmError{
			Number:      errs[i].Number(),
			Error:       errs[i].Error,
			Description: errs[i].Description,
			Source:      errs[i].Source,
		})
	}
	return e
}

// check returns an *APIError when a 2xx reply carries errors[].
// exchange sends r and decodes its reply into a T, whose errors[] (errs) it checks: the round trip of every adapter
// call whose reply has nothing to read before its errors.
func exchange[T any](ctx context.Context, c *Client, r request, errs func(*T) []wire.Error) (*T, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := decode(r, resp, out); err != nil {
		return nil, err
	}
	if err := check(r, resp, errs(out)); err != nil {
		return nil, err
	}
	return out, nil
}

// findJob converts the job of id among a reply's jobs (every version's GET job/ answers a list).
func findJob[W any](jobs []W, id uint32, idOf func(*W) uint32, convert func(*W, *Job)) (*Job, error) {
	for i := range jobs {
		if idOf(&jobs[i]) == id {
			var j Job
			convert(&jobs[i], &j)
			return &j, nil
		}
	}
	return nil, fmt.Errorf("slurmrest: job %d: %w", id, ErrNotFound)
}

func check(r request, resp *response, errs []wire.Error) error {
	if len(errs) == 0 {
		return nil
	}
	return newAPIError(r, resp.status, nil, errs)
}

func isConnRefused(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

func decode(r request, resp *response, v any) error {
	if err := json.Unmarshal(resp.body, v); err != nil {
		return fmt.Errorf("slurmrest: %s %s: decoding reply (HTTP %d, %d bytes): %w",
			r.method, r.path, resp.status, len(resp.body), err)
	}
	return nil
}

// readBody reads a reply in one allocation when its length is known (job listings are large).
func readBody(hr *http.Response) ([]byte, error) {
	if n := hr.ContentLength; n > 0 && n < 1<<31 {
		b := make([]byte, n)
		_, err := io.ReadFull(hr.Body, b)
		return b, err
	}
	return io.ReadAll(hr.Body)
}
