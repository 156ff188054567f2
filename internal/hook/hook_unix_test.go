package hook

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
)

// serveUnix serves h on a socket in a new directory of mode dirMode, and returns the socket's unix: URL.
func serveUnix(t *testing.T, h http.Handler, dirMode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chmod(dir, dirMode))
	path := filepath.Join(dir, "hook.sock")
	ln, err := net.Listen("unix", path)
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return "unix:" + path
}

// A controller on this host reached by its Unix socket: the prolog is served without the pinned certificate
// (no --hook-ca, not even read), and the secret is sent.
func TestPrologOverTheHookSocketNeedsNoCertificate(t *testing.T) {
	w := newHookWorld(t)
	w.url = serveUnix(t, w.api, 0o755)
	w.api.script = []func(http.ResponseWriter){answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"})}
	require.Equal(t, 0, exitStatus(w.run("prolog", "--hook-ca", "/nonexistent/hook.crt")), w.stderr.String())
	got, err := os.ReadFile(filepath.Join(w.stateDir, "42.1.session"))
	require.NoError(t, err)
	require.Equal(t, sealed, got)
	require.Len(t, w.api.prologs, 1)
}

// F5 on the socket: a socket in a directory others may write to could be anyone's. The hook refuses it before
// sending anything; the listener sees no call and no secret.
func TestHookRefusesASocketInADirectoryOthersMayWrite(t *testing.T) {
	var calls atomic.Int32
	squat := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		answer(hookapi.PrologReply{Outcome: hookapi.OutcomeReady, Session: sealed, File: "42.1.session"})(w)
	})
	w := newHookWorld(t)
	w.url = serveUnix(t, squat, 0o777|os.ModeSticky)
	require.Equal(t, 1, exitStatus(w.run("prolog", "--prolog-wait", "1s")), w.stderr.String())
	require.True(t, strings.Contains(w.stderr.String(), "writable by others"), w.stderr.String())
	require.Zero(t, calls.Load(), "the listener of a socket anyone could have made got a call")
}
