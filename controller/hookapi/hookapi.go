// Package hookapi is the contract between the slurmctld hooks and the controller: the wire types of the hook
// API and its client. `juice-slurm hook prolog|epilog` uses only this package, not the controller's runtime.
//
//	POST /v1/prolog  PrologRequest → PrologReply   wait (bounded) until the run's session is ready or failed
//	POST /v1/epilog  EpilogRequest → EpilogReply   the run is finished; wait (bounded) for the release
//	GET  /healthz    the process answers
//	GET  /readyz     the replica can serve (its database answers)
//
// The hook endpoints need "Authorization: Bearer <hook secret>"; a call without it gets 401 and changes nothing.
// What a run asks for is never taken from the hook: the controller reads the job's admin_comment, which only
// job_submit.lua writes, from slurmrestd.
package hookapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
)

// PrologRequest names the run whose prolog waits.
type PrologRequest struct {
	Cluster string `json:"cluster"`
	JobID   uint32 `json:"job_id"`
	Run     int    `json:"run"`
	// WaitSeconds bounds this call's wait; the hook calls again until its own deadline, saying how long it waited.
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

// MaxBody bounds a request body the server reads, and a reply body the client reads.
const MaxBody = 1 << 20

// MineReply answers POST /v1/mine: the runs of the user a MUNGE credential names, newest first, and nobody
// else's (juice-slurm jobs).
type MineReply struct {
	User string    `json:"user"`
	Runs []RunView `json:"runs"`
}

// RunView is one run of a user's Juice job, with its history.
type RunView struct {
	JobID uint32 `json:"job_id"`
	// ArrayJobID and ArrayTaskID name an array's element (job_id is 0 until slurmctld gives it its own id).
	ArrayJobID  uint32      `json:"array_job_id,omitempty"`
	ArrayTaskID *uint32     `json:"array_task_id,omitempty"`
	Run         int         `json:"run"`
	Partition   string      `json:"partition,omitempty"`
	Request     string      `json:"request"`
	State       string      `json:"state"`
	Reason      string      `json:"reason"`
	JobState    string      `json:"job_state"`
	Created     time.Time   `json:"created"`
	Events      []EventView `json:"events"`
}

// EventView is one transition of a run's reservation.
type EventView struct {
	At     time.Time `json:"at"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Event  string    `json:"event"`
	Reason string    `json:"reason"`
}

// Client calls the hook API.
type Client struct {
	// URL is the controller's hook API, e.g. http://127.0.0.1:7171, or a comma-separated list of replicas'
	// (http://ctl1:7171,http://ctl2:7171): a call goes to the one that answered last and moves on to the next
	// when a replica cannot be reached or says it cannot serve (502, 503, 504). Every replica serves every call
	// from PostgreSQL, so any of them will do.
	URL string
	// Secret is the hook secret file.
	Secret *secretfile.File
	// TLS, when set, is the TLS configuration of the calls (ClientTLS: the pinned certificate), and every URL
	// must be https: the secret is never sent in the clear or to a listener that has not proved it is the
	// controller. The hooks always set it; only tests of the calls themselves leave it out.
	TLS *tls.Config
	// HTTP, when set, is used as is; otherwise a client that never follows a redirect.
	HTTP *http.Client

	mu   sync.Mutex
	last int          // the replica that answered last
	hc   *http.Client // made once when HTTP is nil
}

// urls is the list of replicas in URL.
func (c *Client) urls() []string {
	var out []string
	for _, u := range strings.Split(c.URL, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// unavailable reports whether another replica may serve a call that failed with err: this one could not be
// reached or said it cannot serve. A refusal (4xx) or an answer is final, as is a call whose time ran out.
func unavailable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Code == http.StatusBadGateway || he.Code == http.StatusServiceUnavailable || he.Code == http.StatusGatewayTimeout
	}
	return err != nil
}

// An HTTPError is an answer other than 200.
type HTTPError struct {
	Path    string
	Code    int
	Message string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s: HTTP %d: %s", e.Path, e.Code, e.Message)
}

// Permanent reports whether asking again cannot help: the request itself, or the secret, is wrong.
func (e *HTTPError) Permanent() bool {
	return e.Code >= 400 && e.Code < 500 && e.Code != http.StatusRequestTimeout && e.Code != http.StatusTooManyRequests
}

// IsPermanent reports whether err is an answer that asking again cannot change.
func IsPermanent(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Permanent()
}

// Prolog asks for the run's session, waiting on the server up to in.WaitSeconds.
func (c *Client) Prolog(ctx context.Context, in PrologRequest) (PrologReply, error) {
	var out PrologReply
	err := c.call(ctx, "/v1/prolog", in, &out, in.WaitSeconds)
	return out, err
}

// Epilog says the run is finished, waiting on the server up to in.WaitSeconds for the release.
func (c *Client) Epilog(ctx context.Context, in EpilogRequest) (EpilogReply, error) {
	var out EpilogReply
	err := c.call(ctx, "/v1/epilog", in, &out, in.WaitSeconds)
	return out, err
}

// Mine lists the runs of the user whose MUNGE credential cred is (made by `munge -n` as that user): no secret
// and no database credentials, and nobody else's runs. It needs no hook secret; the first replica answers.
func (c *Client) Mine(ctx context.Context, cred string) (MineReply, error) {
	var out MineReply
	urls := c.urls()
	if len(urls) == 0 {
		return out, fmt.Errorf("no hook API URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := c.callOne(ctx, urls[0], "/v1/mine", "Munge "+strings.TrimSpace(cred), []byte("{}"), &out)
	return out, err
}

// callSlack is how much longer than the server's wait a call may take: the answer's round trip.
const callSlack = 5 * time.Second

func (c *Client) call(ctx context.Context, path string, in, out any, waitSeconds float64) error {
	secret, err := c.Secret.Value()
	if err != nil {
		return fmt.Errorf("hook secret: %w", err)
	}
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(waitSeconds*float64(time.Second))+callSlack)
	defer cancel()
	urls := c.urls()
	if len(urls) == 0 {
		return fmt.Errorf("no hook API URL")
	}
	c.mu.Lock()
	first := c.last % len(urls)
	c.mu.Unlock()
	var errs []string
	for i := range urls {
		n := (first + i) % len(urls)
		err := c.callOne(ctx, urls[n], path, "Bearer "+secret, body, out)
		if !unavailable(ctx, err) || i == len(urls)-1 {
			if err == nil || len(errs) == 0 {
				c.mu.Lock()
				c.last = n
				c.mu.Unlock()
				return err
			}
			// The last replica's answer decides (IsPermanent looks at it), the others are told.
			return fmt.Errorf("%s: %w (and before it: %s)", urls[n], err, strings.Join(errs, "; "))
		}
		errs = append(errs, fmt.Sprintf("%s: %v", urls[n], err))
	}
	panic("unreachable: the last replica's answer returns")
}

// callOne makes the call to one replica.
func (c *Client) callOne(ctx context.Context, base, path, auth string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	if c.TLS != nil && req.URL.Scheme != "https" {
		return &HTTPError{Path: path, Code: http.StatusBadRequest,
			Message: fmt.Sprintf("refusing to send the hook secret to %s: the hook API must be https:// and prove itself with the pinned certificate", base)}
	}
	hc := c.HTTP
	if hc == nil {
		c.mu.Lock()
		if c.hc == nil {
			c.hc = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			if c.TLS != nil {
				c.hc.Transport = &http.Transport{TLSClientConfig: c.TLS, Proxy: nil, ForceAttemptHTTP2: false,
					TLSHandshakeTimeout: 10 * time.Second}
			}
		}
		hc = c.hc
		c.mu.Unlock()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	if resp.StatusCode != http.StatusOK {
		return &HTTPError{Path: path, Code: resp.StatusCode, Message: strings.TrimSpace(string(raw))}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: the answer is not JSON: %w", path, err)
	}
	return nil
}
