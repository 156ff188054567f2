// Package hookapi is the contract between the slurmctld hooks and the controller: the wire types of the hook
// API (package hookwire's, which the prolog's own binary links alone) and its client, over TLS to https: replicas
// and over the controller's Unix socket to a unix: one. `juice-slurm hook prolog|epilog` and `juice-slurm jobs`
// use only this package, not the controller's runtime.
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
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/juice-slurm/juice-slurm/controller/hookapi/hookwire"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
)

// The hooks' requests and replies are package hookwire's, which the prolog's own binary links without this
// package's HTTP and TLS.
type (
	PrologRequest = hookwire.PrologRequest
	PrologReply   = hookwire.PrologReply
	EpilogRequest = hookwire.EpilogRequest
	EpilogReply   = hookwire.EpilogReply
	HTTPError     = hookwire.HTTPError
)

// Outcomes of a hook call.
const (
	OutcomeReady    = hookwire.OutcomeReady
	OutcomeFailed   = hookwire.OutcomeFailed
	OutcomeWaiting  = hookwire.OutcomeWaiting
	OutcomeNone     = hookwire.OutcomeNone
	OutcomeReleased = hookwire.OutcomeReleased
)

// MaxBody bounds a request body the server reads, and a reply body the client reads.
const MaxBody = hookwire.MaxBody

// UnixPrefix starts a hook API URL that names the controller's Unix socket (hookwire.DialUnix).
const UnixPrefix = hookwire.UnixPrefix

// IsPermanent reports whether err is an answer that asking again cannot change.
func IsPermanent(err error) bool { return hookwire.IsPermanent(err) }

// SocketPath is the socket's path in a unix: URL.
func SocketPath(url string) string { return hookwire.SocketPath(url) }

// DialUnix connects to the hook API's socket at path and proves its listener (hookwire.DialUnix).
func DialUnix(ctx context.Context, path string) (*hookwire.Conn, error) {
	return hookwire.DialUnix(ctx, path)
}

// NeedsTLS reports whether any replica in a comma-separated list of hook API URLs is reached over the network.
func NeedsTLS(urls string) bool { return hookwire.NeedsTLS(urls) }

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

// Client calls the hook API: the hooks' calls through hookwire.Client (unix: replicas over the socket, the
// others over TLS here), and /v1/mine.
type Client struct {
	// URL is the controller's hook API, e.g. https://127.0.0.1:7171 or unix:/run/juice-slurm/hook.sock, or a
	// comma-separated list of replicas' (hookwire.Client.URL).
	URL string
	// Secret is the hook secret file.
	Secret *secretfile.File
	// TLS, when set, is the TLS configuration of the calls (ClientTLS: the pinned certificate), and every URL
	// must be https: or unix: (whose listener hookwire.DialUnix proves): the secret is never sent in the clear or
	// to a listener that has not proved it is the controller. The hooks set it whenever a URL is https:
	// (NeedsTLS); only tests of the calls themselves leave it out otherwise.
	TLS *tls.Config
	// HTTP, when set, is used as is for the https: replicas; otherwise a client that never follows a redirect.
	HTTP *http.Client

	mu   sync.Mutex
	wire *hookwire.Client // made once
	hc   *http.Client     // made once when HTTP is nil
}

func (c *Client) hooks() *hookwire.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wire == nil {
		c.wire = &hookwire.Client{URL: c.URL, Secret: c.Secret, Post: c.callOne}
	}
	return c.wire
}

// Prolog asks for the run's session, waiting on the server up to in.WaitSeconds.
func (c *Client) Prolog(ctx context.Context, in PrologRequest) (PrologReply, error) {
	return c.hooks().Prolog(ctx, in)
}

// Epilog says the run is finished, waiting on the server up to in.WaitSeconds for the release.
func (c *Client) Epilog(ctx context.Context, in EpilogRequest) (EpilogReply, error) {
	return c.hooks().Epilog(ctx, in)
}

// Mine lists the runs of the user whose MUNGE credential cred is (made by `munge -n` as that user): no secret
// and no database credentials, and nobody else's runs. It needs no hook secret; the first replica answers.
func (c *Client) Mine(ctx context.Context, cred string) (MineReply, error) {
	var out MineReply
	urls := hookwire.URLs(c.URL)
	if len(urls) == 0 {
		return out, fmt.Errorf("no hook API URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	auth := "Munge " + strings.TrimSpace(cred)
	if hookwire.IsUnix(urls[0]) {
		raw, err := hookwire.PostUnix(ctx, hookwire.SocketPath(urls[0]), "/v1/mine", auth, []byte("{}"))
		if err != nil {
			return out, err
		}
		if err := json.Unmarshal(raw, &out); err != nil {
			return out, fmt.Errorf("/v1/mine: the answer is not JSON: %w", err)
		}
		return out, nil
	}
	return out, c.callOne(ctx, urls[0], "/v1/mine", auth, []byte("{}"), &out)
}

// callOne makes the call to one https: (or, in tests without TLS, http:) replica.
func (c *Client) callOne(ctx context.Context, base, path, auth string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	if c.TLS != nil && req.URL.Scheme != "https" {
		return &HTTPError{Path: path, Code: http.StatusBadRequest,
			Message: fmt.Sprintf("refusing to send the hook secret to %s: the hook API must be https:// and prove itself with the pinned certificate, or a unix: socket", base)}
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
