package agentemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// client speaks to the controller as the legacy pkg/restapi.Client does, and records what it saw.
type client struct {
	base          string // host:port (scheme probe) or a URL
	tokenFile     string
	timeout       time.Duration
	readWholeBody bool
	http          *http.Client

	mu       sync.Mutex
	token    string
	tokenMod time.Time
}

func newClient(c Config) *client {
	return &client{
		base:          strings.TrimSuffix(c.Controller, "/"),
		tokenFile:     c.TokenFile,
		timeout:       time.Duration(c.RequestTimeout),
		readWholeBody: c.ReadWholeBody,
		// Like the real agent's: a default client, no timeout of its own.
		http: &http.Client{},
	}
}

// bearer returns the token, re-read when the file changed.
func (c *client) bearer() (string, error) {
	if c.tokenFile == "" {
		return "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st, err := os.Stat(c.tokenFile)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if c.token == "" || !st.ModTime().Equal(c.tokenMod) {
		b, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return "", fmt.Errorf("token file: %w", err)
		}
		c.token, c.tokenMod = strings.TrimSpace(string(b)), st.ModTime()
	}
	return c.token, nil
}

// HTTPError is a non-200 answer.
type HTTPError struct {
	Method, Path string
	Status       int
	Body         string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("%s %s: error received from server, code %d, message: %q", e.Method, e.Path, e.Status, e.Body)
}

// do sends one request. Without a scheme in base it tries https first and, on ErrSchemeMismatch, http: what
// restapi.Client.do does (a fresh TLS attempt, hence an extra connection, per request).
func (c *client) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	if strings.Contains(c.base, "://") {
		return c.doURL(ctx, method, c.base+path, body)
	}
	resp, err := c.doURL(ctx, method, "https://"+c.base+path, body)
	if err == nil || !errors.Is(err, http.ErrSchemeMismatch) {
		return resp, err
	}
	return c.doURL(ctx, method, "http://"+c.base+path, body)
}

func (c *client) doURL(ctx context.Context, method, url string, body []byte) (*http.Response, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		// The body is read before do returns to the caller's read; cancel after the read.
		resp, err := c.send(ctx, method, url, body)
		if err != nil {
			cancel()
			return nil, err
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	}
	return c.send(ctx, method, url, body)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error { err := c.ReadCloser.Close(); c.cancel(); return err }

func (c *client) send(ctx context.Context, method, url string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	tok, err := c.bearer()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return c.http.Do(req)
}

// readBody reads a response body. By default it does what restapi's parseBody does: one Read into a buffer of
// the Content-Length, an error when fewer bytes came. A body without a Content-Length reads as empty.
func (c *client) readBody(resp *http.Response) ([]byte, error) {
	if c.readWholeBody {
		return io.ReadAll(resp.Body)
	}
	if resp.ContentLength <= 0 {
		return nil, nil
	}
	buf := make([]byte, resp.ContentLength)
	n, err := resp.Body.Read(buf)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if int64(n) != resp.ContentLength {
		return nil, &ShortReadError{Got: n, Want: resp.ContentLength}
	}
	return buf, nil
}

// ShortReadError is the legacy client's single-Read failure.
type ShortReadError struct {
	Got  int
	Want int64
}

func (e *ShortReadError) Error() string {
	return fmt.Sprintf("body length %d did not match expected content length %d (the legacy client reads a body with one Read)", e.Got, e.Want)
}

// call sends a request and checks the answer as restapi does: status 200 and, when wantType is set, exactly
// that Content-Type.
func (c *client) call(ctx context.Context, method, path string, in any, wantType string) ([]byte, error) {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return nil, err
		}
	}
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := c.readBody(resp)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &HTTPError{Method: method, Path: path, Status: resp.StatusCode, Body: string(b)}
	}
	if wantType != "" && resp.Header.Get("Content-Type") != wantType {
		return nil, fmt.Errorf("%s %s: expected Content-Type=%s, received %s", method, path, wantType, resp.Header.Get("Content-Type"))
	}
	return b, nil
}

// register is POST /v1/register/agent: the answer is the agent's id as text/plain.
func (c *client) register(ctx context.Context, a AgentInfo) (string, error) {
	b, err := c.call(ctx, http.MethodPost, "/v1/register/agent", a, "text/plain")
	if err != nil {
		return "", err
	}
	id := string(b)
	if id == "" {
		return "", errors.New("POST /v1/register/agent: empty id")
	}
	return id, nil
}

// getAgent is GET /v1/agent/{id}.
func (c *client) getAgent(ctx context.Context, id string) (AgentInfo, int, error) {
	b, err := c.call(ctx, http.MethodGet, "/v1/agent/"+id, nil, "application/json")
	if err != nil {
		return AgentInfo{}, 0, err
	}
	var a AgentInfo
	if err := json.Unmarshal(b, &a); err != nil {
		return AgentInfo{}, len(b), fmt.Errorf("GET /v1/agent/%s: %w", id, err)
	}
	return a, len(b), nil
}

// putAgent is PUT /v1/agent/{id}; the controller answers 200 with an empty body.
func (c *client) putAgent(ctx context.Context, u AgentUpdate) error {
	_, err := c.call(ctx, http.MethodPut, "/v1/agent/"+u.ID, u, "")
	return err
}
