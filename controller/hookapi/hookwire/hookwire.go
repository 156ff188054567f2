// Package hookwire is the part of the hook API that the prolog's own binary (cmd/juice-slurm-hook) links: the
// hooks' requests and replies, and a client that reaches a controller on this host over its Unix socket. It
// depends on no HTTP or TLS package: their package inits alone cost a prolog more than the rest of its start
// (TestHookLinksLittle). Package hookapi adds the API's other calls and the TLS transport for replicas on other
// hosts, and serves the same types.
package hookwire

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
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
	return e.Code >= 400 && e.Code < 500 && e.Code != 408 && e.Code != 429
}

// IsPermanent reports whether err is an answer that asking again cannot change.
func IsPermanent(err error) bool {
	var he *HTTPError
	return errors.As(err, &he) && he.Permanent()
}

// PostFunc makes one call to one replica: POST path with the Authorization header auth and the JSON body, the
// reply's JSON decoded into out (a *PrologReply or an *EpilogReply); an answer other than 200 is an *HTTPError.
type PostFunc func(ctx context.Context, base, path, auth string, body []byte, out any) error

// Client calls the hook API's prolog and epilog.
type Client struct {
	// URL is the controller's hook API: unix:/run/juice-slurm/hook.sock (unix.go) or https://HOST:PORT, or a
	// comma-separated list of replicas': a call goes to the one that answered last and moves on to the next when a
	// replica cannot be reached or says it cannot serve (502, 503, 504). Every replica serves every call from
	// PostgreSQL, so any of them will do.
	URL string
	// Secret is the hook secret file.
	Secret *secretfile.File
	// Post calls a replica that is not a unix: socket (package hookapi's, over TLS); nil: such a replica is
	// refused without a call.
	Post PostFunc

	mu   sync.Mutex
	last int // the replica that answered last
}

// URLs is the list of replicas in a comma-separated list of hook API URLs.
func URLs(list string) []string {
	var out []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimRight(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Prolog asks for the run's session, waiting on the server up to in.WaitSeconds.
func (c *Client) Prolog(ctx context.Context, in PrologRequest) (PrologReply, error) {
	var out PrologReply
	body, err := encodePrologRequest(in)
	if err == nil {
		err = c.call(ctx, "/v1/prolog", body, &out, func(raw []byte) error { return decodePrologReply(raw, &out) }, in.WaitSeconds)
	}
	return out, err
}

// Epilog says the run is finished, waiting on the server up to in.WaitSeconds for the release.
func (c *Client) Epilog(ctx context.Context, in EpilogRequest) (EpilogReply, error) {
	var out EpilogReply
	body, err := encodeEpilogRequest(in)
	if err == nil {
		err = c.call(ctx, "/v1/epilog", body, &out, func(raw []byte) error { return decodeEpilogReply(raw, &out) }, in.WaitSeconds)
	}
	return out, err
}

// callSlack is how much longer than the server's wait a call may take: the answer's round trip.
const callSlack = 5 * time.Second

// call makes one call, body its request (codec.go): out is the reply that Post (a replica over TLS) fills, decode
// what fills it from a unix: replica's answer.
func (c *Client) call(ctx context.Context, path string, body []byte, out any, decode func([]byte) error, waitSeconds float64) error {
	secret, err := c.Secret.Value()
	if err != nil {
		return fmt.Errorf("hook secret: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(waitSeconds*float64(time.Second))+callSlack)
	defer cancel()
	urls := URLs(c.URL)
	if len(urls) == 0 {
		return fmt.Errorf("no hook API URL")
	}
	c.mu.Lock()
	first := c.last % len(urls)
	c.mu.Unlock()
	var errs []string
	for i := range urls {
		n := (first + i) % len(urls)
		err := c.callOne(ctx, urls[n], path, "Bearer "+secret, body, out, decode)
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

func (c *Client) callOne(ctx context.Context, base, path, auth string, body []byte, out any, decode func([]byte) error) error {
	if IsUnix(base) {
		raw, err := PostUnix(ctx, SocketPath(base), path, auth, body)
		if err != nil {
			return err
		}
		if err := decode(raw); err != nil {
			return fmt.Errorf("%s: the answer is not the hook API's JSON: %w", path, err)
		}
		return nil
	}
	if c.Post == nil {
		return &HTTPError{Path: path, Code: 400, Message: fmt.Sprintf("refusing to send the hook secret to %s: "+
			"this binary reaches only a controller's unix: socket (juice-slurm hook reaches https:// ones)", base)}
	}
	return c.Post(ctx, base, path, auth, body, out)
}

// unavailable reports whether another replica may serve a call that failed with err: this one could not be
// reached or said it cannot serve. A refusal (4xx) or an answer is final, as is a call whose time ran out.
func unavailable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		return he.Code == 502 || he.Code == 503 || he.Code == 504
	}
	return err != nil
}

// PostUnix makes one call to the hook API on the Unix socket at sock (DialUnix proves its listener first) and
// returns the body of its answer; an answer other than 200 is an *HTTPError. It speaks HTTP/1.0, so that the
// answer is never chunked and ends where the connection does: a few lines of code instead of an HTTP client whose
// package inits would cost every prolog more than the call.
func PostUnix(ctx context.Context, sock, path, auth string, body []byte) ([]byte, error) {
	conn, err := DialUnix(ctx, sock)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	req := "POST " + path + " HTTP/1.0\r\nHost: hook-socket\r\nAuthorization: " + auth +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	if _, err := conn.Write(append([]byte(req), body...)); err != nil {
		return nil, wrapCtx(ctx, fmt.Errorf("%s: %w", path, err))
	}
	code, raw, err := readResponse(bufio.NewReader(conn))
	if err != nil {
		return nil, wrapCtx(ctx, fmt.Errorf("%s: %w", path, err))
	}
	if code != 200 {
		return nil, &HTTPError{Path: path, Code: code, Message: strings.TrimSpace(string(raw))}
	}
	return raw, nil
}

// wrapCtx adds the context's error to err when the context ended: the caller sees why the call stopped. A kernel
// time-out is the context's deadline (the socket's time-outs are set from it), even where the context's own timer
// has not fired yet.
func wrapCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(err, ctx.Err())
	}
	if _, ok := ctx.Deadline(); ok && errors.Is(err, errTimedOut) {
		return errors.Join(err, context.DeadlineExceeded)
	}
	return err
}

// readResponse reads an HTTP/1.x answer to an HTTP/1.0 request: the status line, the header (Content-Length when
// given) and the body, at most MaxBody bytes.
func readResponse(r *bufio.Reader) (int, []byte, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, nil, fmt.Errorf("no answer: %w", err)
	}
	f := strings.Fields(line)
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/1.") {
		return 0, nil, fmt.Errorf("not an HTTP answer: %q", strings.TrimSpace(line))
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, nil, fmt.Errorf("not an HTTP answer: %q", strings.TrimSpace(line))
	}
	length := -1
	for {
		h, err := r.ReadString('\n')
		if err != nil {
			return 0, nil, fmt.Errorf("answer cut in its header: %w", err)
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		name, value, _ := strings.Cut(h, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-length":
			if length, err = strconv.Atoi(strings.TrimSpace(value)); err != nil || length < 0 {
				return 0, nil, fmt.Errorf("bad Content-Length %q", value)
			}
		case "transfer-encoding":
			return 0, nil, fmt.Errorf("a %s answer to an HTTP/1.0 request", strings.TrimSpace(value))
		}
	}
	if length > MaxBody {
		return 0, nil, fmt.Errorf("an answer of %d bytes, over %d", length, MaxBody)
	}
	if length >= 0 {
		body := make([]byte, length)
		if _, err := io.ReadFull(r, body); err != nil {
			return 0, nil, fmt.Errorf("answer cut in its body: %w", err)
		}
		return code, body, nil
	}
	body, err := io.ReadAll(io.LimitReader(r, MaxBody+1))
	if err != nil {
		return 0, nil, fmt.Errorf("answer cut in its body: %w", err)
	}
	if len(body) > MaxBody {
		return 0, nil, fmt.Errorf("an answer over %d bytes", MaxBody)
	}
	return code, body, nil
}
