package juiceapi

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Error kinds, for errors.Is. Every error from HTTPClient is an *APIError carrying one of them.
var (
	// ErrUnauthorized: the controller refused the token (HTTP 401/403). Not retried: fix the token.
	ErrUnauthorized = errors.New("juice: unauthorized (check the M2M token)")
	// ErrNotFound: the controller does not know the session or agent (legacy: 500 text "... not found").
	ErrNotFound = errors.New("juice: not found")
	// ErrNoCapacity: the request can never fit its pool (unknown pool, more GPUs than any agent has,
	// more VRAM than any GPU). Legacy 500 text containing "no capacity", "cannot fit" or "can never fit".
	ErrNoCapacity = errors.New("juice: no capacity")
	// ErrInvalidRequest: the request breaks the client's own bounds (no pool, no GPU, too many), so it was never
	// sent and asking again cannot help. Like ErrNoCapacity, it says no session exists for the request's key.
	ErrInvalidRequest = errors.New("juice: invalid request")
	// ErrUnavailable: the controller could not be reached or kept failing (5xx, timeouts, dropped
	// connections) within the retry budget. The caller may try again later.
	ErrUnavailable = errors.New("juice: controller unavailable")
	// ErrNotYet: the session cannot be cancelled yet: it is assigned but its agent may not have taken it. The
	// legacy controller marks such a session canceling, the agent meets a cancel of a session it does not hold,
	// and exits. Cancel again once it is active.
	ErrNotYet = errors.New("juice: not yet")
	// ErrUnexpected: an answer the client does not understand (an HTTP status outside the model, a
	// body that does not parse). Not retried: usually a wrong base URL or a proxy in the way.
	ErrUnexpected = errors.New("juice: unexpected answer")
)

// APIError is a failed call: what was asked, what the controller said, and its kind.
type APIError struct {
	Method, Path string
	StatusCode   int    // 0 when no HTTP answer came back
	Message      string // the server's text (trimmed, at most 512 bytes, token redacted)
	Attempts     int
	Kind         error // one of the Err* kinds above
	Err          error // the transport or decoding cause, if any
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: ", e.Method, e.Path)
	switch {
	case e.StatusCode != 0 && e.Message != "":
		fmt.Fprintf(&b, "HTTP %d: %s", e.StatusCode, e.Message)
	case e.StatusCode != 0:
		fmt.Fprintf(&b, "HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	case e.Message != "":
		b.WriteString(e.Message)
	case e.Err != nil:
		b.WriteString(e.Err.Error())
	default:
		b.WriteString(e.Kind.Error())
	}
	if e.StatusCode != 0 && e.Err != nil {
		fmt.Fprintf(&b, " (%v)", e.Err)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (after %d attempts)", e.Attempts)
	}
	return b.String()
}

// Unwrap exposes both the kind and the cause to errors.Is / errors.As.
func (e *APIError) Unwrap() []error {
	out := make([]error, 0, 2)
	if e.Kind != nil {
		out = append(out, e.Kind)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// classify maps a non-200 answer to a kind and whether another attempt may help.
//
// The legacy controller answers every failure but a bad token with 500 text/plain, so the text is
// all there is to tell a missing session from an outage. The simulator's no-capacity text starts
// with "no capacity:"; the other phrases are accepted in case a real controller words it so.
func classify(status int, text string) (kind error, retry bool) {
	lower := strings.ToLower(text)
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ErrUnauthorized, false
	case status == http.StatusTooManyRequests:
		return ErrUnavailable, true
	case strings.Contains(lower, "no capacity") || strings.Contains(lower, "cannot fit") ||
		strings.Contains(lower, "can never fit"):
		return ErrNoCapacity, false
	case status >= 500 && strings.Contains(lower, "not found"):
		return ErrNotFound, false
	case status >= 500:
		return ErrUnavailable, true
	default:
		// A 404 here is the HTTP router's, not the controller's: the legacy controller reports a
		// missing session as 500. Treating it as "session gone" could make the reconciler book a
		// second session because of a misconfigured base URL.
		return ErrUnexpected, false
	}
}
