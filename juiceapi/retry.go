package juiceapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// call is one logical request; do turns it into one or more attempts.
type call struct {
	method, path string
	body         []byte // JSON, or nil
	key          string // Idempotency-Key, or ""
	once         bool   // never repeat: the controller may have acted on an attempt whose answer was lost
	decode       func(contentType string, body []byte) error
}

// maxBody bounds an answer: a listing of a pool's agents with their sessions runs to megabytes on a large pool
// (1,250 agents holding 10,000 sessions: about 4 MiB from juice-sim); anything near the bound is a proxy page or
// an attack, and is refused as such rather than cut and misread.
const maxBody = 64 << 20

// do runs the call with retries of "transient" kinds. GETs are safe to repeat; a POST or DELETE is sent once
// (call.once), since the legacy controller books a second session for a repeated POST and reopens a closed
// session for a repeated DELETE: their callers look first, then ask again.
func (c *HTTPClient) do(ctx context.Context, cl call) error {
	var last *APIError
	for attempt := 1; ; attempt++ {
		err, retryAfter := c.attempt(ctx, cl)
		if err == nil {
			return nil
		}
		err.Attempts = attempt
		last = err
		retryable := errors.Is(err, ErrUnavailable) && !cl.once
		if !retryable || attempt >= c.attempts || ctx.Err() != nil {
			break
		}
		wait := c.retry.Delay(attempt - 1)
		if retryAfter > 0 {
			wait = min(max(wait, retryAfter), c.retry.Max)
		}
		c.log.V(1).Info("retrying juice controller call", "method", cl.method, "path", cl.path,
			"attempt", attempt, "wait", wait, "error", err.Error())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil && last.Kind == ErrUnavailable {
		// Keep the last cause but say why we stopped: the caller's deadline or cancellation.
		last.Err = errors.Join(last.Err, ctx.Err())
	}
	return last
}

// attempt makes one HTTP exchange, bounded by the per-attempt timeout.
func (c *HTTPClient) attempt(parent context.Context, cl call) (*APIError, time.Duration) {
	fail := func(status int, msg string, kind, cause error) *APIError {
		return &APIError{Method: cl.method, Path: cl.path, StatusCode: status, Message: msg, Kind: kind, Err: cause}
	}
	token, err := c.tokens.Value()
	if err != nil {
		return fail(0, "", ErrUnauthorized, err), 0
	}
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()

	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.base.String()+cl.path, body)
	if err != nil {
		return fail(0, "", ErrUnexpected, err), 0
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json, text/plain")
	req.Header.Set("User-Agent", c.version)
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}

	resp, err := c.hc.Do(req)
	if err != nil {
		// Connection refused, reset, dropped, or our per-attempt timeout: all worth another try.
		return fail(0, "", ErrUnavailable, redactErr(err, token)), 0
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return fail(resp.StatusCode, "", ErrUnavailable, fmt.Errorf("read answer: %w", redactErr(err, token))), 0
	}
	if len(raw) > maxBody {
		return fail(resp.StatusCode, "", ErrUnexpected, fmt.Errorf("answer larger than %d MiB: refused", maxBody>>20)), 0
	}
	if resp.StatusCode != http.StatusOK {
		msg := serverText(raw, token)
		kind, retry := classify(resp.StatusCode, msg)
		if kind == ErrUnauthorized && c.tokens.Changed(token) {
			// The file was rotated while this attempt was in flight: one more try with the new token.
			kind, retry = ErrUnavailable, true
		}
		var after time.Duration
		if retry {
			after = retryAfter(resp.Header.Get("Retry-After"))
		}
		return fail(resp.StatusCode, msg, kind, nil), after
	}
	if err := cl.decode(resp.Header.Get("Content-Type"), raw); err != nil {
		return fail(resp.StatusCode, "", ErrUnexpected, fmt.Errorf("decode answer: %w", err)), 0
	}
	return nil, 0
}

// serverText keeps the server's message readable and bounded, and never echoes the token.
func serverText(raw []byte, token string) string {
	msg := strings.TrimSpace(string(raw))
	var legacy struct {
		Message string `json:"message"`
	}
	if strings.HasPrefix(msg, "{") && json.Unmarshal([]byte(msg), &legacy) == nil && legacy.Message != "" {
		msg = legacy.Message
	}
	msg = strings.ReplaceAll(msg, token, "[REDACTED]")
	return truncate(msg, 512)
}

// redactErr makes sure no transport error can carry the token (none should: it is only in a header).
func redactErr(err error, token string) error {
	if strings.Contains(err.Error(), token) {
		return errors.New(strings.ReplaceAll(err.Error(), token, "[REDACTED]"))
	}
	return err
}

func retryAfter(v string) time.Duration {
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && secs > 0 {
		return time.Duration(secs) * time.Second
	}
	return 0
}
