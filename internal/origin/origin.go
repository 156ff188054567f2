// Package origin keeps credentials on the server they were meant for. Go's http.Client follows redirects and
// re-sends custom headers (slurmrestd's X-SLURM-USER-TOKEN) to any host, and Authorization to another port or
// scheme of the same host: a redirect, from a compromised or impersonated server, or a port a local user took
// over, would hand the token on. Clients with a token follow a redirect only within one origin (scheme, host and
// port) and refuse any other.
package origin

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Same reports whether a and b are one origin: the same scheme, host and port (a missing port is the scheme's
// default).
func Same(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// maxRedirects is net/http's own bound.
const maxRedirects = 10

// CheckRedirect is an http.Client's CheckRedirect that follows a redirect only within the first request's origin.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	if first := via[0].URL; !Same(first, req.URL) {
		return fmt.Errorf("refusing a redirect from %s to %s: credentials never leave the server they are for",
			hostport(first), req.URL.Scheme+"://"+req.URL.Host)
	}
	return nil
}

func hostport(u *url.URL) string {
	return u.Scheme + "://" + net.JoinHostPort(u.Hostname(), port(u))
}
