package hook

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
)

// selfSigned is a certificate for 127.0.0.1 that the hooks do not pin: what a squatter would serve.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "squatter"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// F5: while the controller restarts, a local user takes its port. The hook sends its secret to no listener that
// cannot prove it is the controller: not to one with another certificate (the handshake fails, no request is
// made), and not over plain HTTP; the prolog fails instead, and the squatter sees no secret.
func TestHookSendsTheSecretOnlyToThePinnedController(t *testing.T) {
	var sawSecret atomic.Int32
	steal := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), testSecret) {
			sawSecret.Add(1)
		}
		answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"})(w)
	})
	squatter := httptest.NewUnstartedServer(steal)
	squatter.TLS = &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}}
	squatter.StartTLS()
	t.Cleanup(squatter.Close)
	plain := httptest.NewServer(steal)
	t.Cleanup(plain.Close)

	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"}))
	good := w.url
	w.url = squatter.URL
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "1s")), w.stderr.String())
	require.Contains(t, w.stderr.String(), "certificate")

	w.url = plain.URL
	w.stderr.Reset()
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "5s")), w.stderr.String())
	require.Contains(t, w.stderr.String(), "refusing to send the hook secret")
	require.Zero(t, sawSecret.Load(), "a squatter got the hook secret")

	// No pinned certificate at all: the prolog fails, the epilog does no harm.
	w.url = good
	w.stderr.Reset()
	require.Equal(t, 1, exitStatus(w.run("prolog", "--hook-ca", "")), w.stderr.String())
	require.Contains(t, w.stderr.String(), "--hook-ca")
	require.Equal(t, 0, exitStatus(w.run("epilog", "--hook-ca", "")))
	require.Empty(t, w.api.prologs)

	// The controller itself, pinned: served.
	w.stderr.Reset()
	require.Equal(t, 0, exitStatus(w.run("prolog")), w.stderr.String())
}

// F10, F11: the hook log is never readable by others (a file made 0644 is made 0600), and a reason with a newline
// in it stays on its own line: nobody forges a line of the log.
func TestHookLogIsPrivateAndUnforgeable(t *testing.T) {
	w := newHookWorld(t, answer(hookapi.PrologReply{Outcome: hookapi.OutcomeFailed,
		Reason: "no\n2026-12-04T00:00:00Z juice: job 7 run 0: session ready after 1ms"}))
	logFile := filepath.Join(t.TempDir(), "hooks.log")
	require.NoError(t, os.WriteFile(logFile, nil, 0o644))
	require.NoError(t, os.Chmod(logFile, 0o644))
	require.Equal(t, 1, exitStatus(w.run("prolog", "--hook-log", logFile)))
	st, err := os.Stat(logFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	b, err := os.ReadFile(logFile)
	require.NoError(t, err)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		require.Contains(t, line, "juice: job 42 run 1: ", "every line is the hook's own: %q", line)
	}
}
