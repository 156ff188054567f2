package slurmrest

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNotFound: slurmctld does not know the job (never existed, or aged out after MinJobAge).
	ErrNotFound = errors.New("slurmrest: job not found")
	// ErrUnauthorized: the token was refused (expired, bad signature, unknown user).
	ErrUnauthorized = errors.New("slurmrest: unauthorized")
	// ErrUnsupported: the negotiated API version cannot do this.
	ErrUnsupported = errors.New("slurmrest: not supported by this API version")
	// ErrNoVersion: the server offers no API version this client speaks.
	ErrNoVersion = errors.New("slurmrest: no supported API version offered by the server")
	// ErrControllerDown: slurmrestd answers but slurmctld does not.
	ErrControllerDown = errors.New("slurmrest: slurmctld not responding")
)

// Slurm error numbers (slurm/slurm_errno.h) the client interprets.
const (
	errnoAuthentication  = 1007 // SLURM_PROTOCOL_AUTHENTICATION_ERROR
	errnoInvalidJobID    = 2017 // ESLURM_INVALID_JOB_ID
	errnoAlreadyDone     = 2021 // ESLURM_ALREADY_DONE
	errnoJobHeld         = 2042 // ESLURM_JOB_HELD: informational on a held submission
	errnoJobFinished     = 2084 // ESLURM_JOB_FINISHED
	errnoAccessDenied    = 2002 // ESLURM_ACCESS_DENIED
	errnoUserIDMissing   = 2010 // ESLURM_USER_ID_MISSING
	errnoAuthCredInvalid = 6000 // ESLURM_AUTH_CRED_INVALID .. 6099
)

// SlurmError is one entry of a reply's errors[].
type SlurmError struct {
	Number      int    // error_number (error_code, errno on older versions)
	Error       string // short text
	Description string // long text
	Source      string // where slurmrestd saw it
}

func (e SlurmError) String() string {
	var b strings.Builder
	if e.Number != 0 {
		fmt.Fprintf(&b, "[%d] ", e.Number)
	}
	b.WriteString(e.Error)
	if e.Description != "" && e.Description != e.Error {
		if e.Error != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Description)
	}
	if e.Source != "" {
		fmt.Fprintf(&b, " (%s)", e.Source)
	}
	return b.String()
}

// APIError is a reply from slurmrestd that reports a failure: a non-2xx status or a non-empty errors[].
type APIError struct {
	Method     string
	Path       string
	StatusCode int          // HTTP status
	Errors     []SlurmError // slurmrestd's errors[] (may be empty, e.g. 401 with a text body)
	Body       string       // the start of a body that was not JSON
	// Version is the API version the request used.
	Version string

	jsonBody bool // the body was a JSON document
}

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "slurmrest: %s %s: HTTP %d", e.Method, e.Path, e.StatusCode)
	for i, se := range e.Errors {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(se.String())
	}
	if len(e.Errors) == 0 && e.Body != "" {
		b.WriteString(": ")
		b.WriteString(e.Body)
	}
	return b.String()
}

// HasNumber reports whether errors[] holds the given Slurm error number.
func (e *APIError) HasNumber(n int) bool {
	for _, se := range e.Errors {
		if se.Number == n {
			return true
		}
	}
	return false
}

// Is makes errors.Is(err, ErrNotFound) and errors.Is(err, ErrUnauthorized) work.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.notFound()
	case ErrUnauthorized:
		return e.unauthorized()
	}
	return false
}

func (e *APIError) notFound() bool {
	if e.HasNumber(errnoInvalidJobID) {
		return true
	}
	// v0.0.36 reports an unknown job as error_code 0 with a text.
	for _, se := range e.Errors {
		if strings.Contains(se.Error, "unknown job") || strings.Contains(se.Error, "Invalid job id") {
			return true
		}
	}
	return false
}

func (e *APIError) unauthorized() bool {
	switch e.StatusCode {
	case 401, 403, 511:
		return true
	}
	for _, se := range e.Errors {
		if se.Number == errnoAuthentication || (se.Number >= errnoAuthCredInvalid && se.Number < errnoAuthCredInvalid+100) {
			return true
		}
	}
	// Slurm 22.05 (v0.0.36..38) answers a refused token with a 500 and no useful number: -1 from
	// slurm_load_* (v0.0.38) or 5005 "zero bytes sent" (v0.0.36), because slurmctld hangs up on the
	// credential. A controller that is really down gives 1800.. instead.
	if e.StatusCode == 500 && strings.HasPrefix(e.Version, "v0.0.3") {
		// v0.0.36 says nothing at all: a 500 with a JSON body and an empty errors[].
		if e.Version == "v0.0.36" && len(e.Errors) == 0 && e.Body == "" && e.jsonBody {
			return true
		}
		for _, se := range e.Errors {
			if (se.Number == -1 && strings.HasPrefix(se.Source, "slurm_load_")) || se.Number == 5005 {
				return true
			}
		}
	}
	return false
}

// transient reports whether retrying the same request may succeed.
func (e *APIError) transient() bool {
	if e.notFound() || e.unauthorized() {
		return false
	}
	switch e.StatusCode {
	case 502, 503, 504:
		return true
	}
	if e.StatusCode < 500 {
		return false
	}
	if len(e.Errors) == 0 {
		return true // not a slurmrestd answer (a proxy, a crash): try again
	}
	for _, se := range e.Errors {
		n := se.Number
		if (n >= 1001 && n <= 1004) || (n >= 1800 && n <= 1899) || (n >= 5000 && n <= 5004) {
			return true
		}
		if strings.Contains(se.Error, "Unable to contact slurm controller") {
			return true
		}
	}
	return false
}
