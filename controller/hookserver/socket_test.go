package hookserver

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// serveSocket runs a on a Unix socket in a new directory, as the controller does (ListenLocal, HTTPServer), with
// allowed deciding who may call; it returns the socket's unix: URL.
func serveSocket(t *testing.T, a *Server, allowed func(uint32) bool) string {
	t.Helper()
	withSecret(t, a)
	run := filepath.Join(t.TempDir(), "run")
	require.NoError(t, os.Mkdir(run, 0o755))
	path := filepath.Join(run, "hook.sock")
	ln, err := netListenUnix(path)
	require.NoError(t, err)
	srv := a.HTTPServer()
	go srv.Serve(a.ListenLocal(ln, allowed))
	t.Cleanup(func() { srv.Close() })
	return hookapi.UnixPrefix + path
}

func readyRun() *memStore {
	return &memStore{r: reconcile.Reservation{ID: uuid.New(), Run: reconcile.RunID{Cluster: "c1", JobID: 1},
		Spec: reconcile.Spec{Wanted: true, JobState: "CONFIGURING"}, Status: reconcile.Status{State: reconcile.StateFailed, FailReason: "no pool"}}}
}

// On the hook socket the caller's uid decides before anything is read: an allowed caller is served (here this
// test's own uid), any other is disconnected and counted, its call never reaching the store.
func TestHookSocketServesOnlyAllowedUIDs(t *testing.T) {
	client := func(url string) *hookapi.Client {
		f := filepath.Join(t.TempDir(), "hook.secret")
		require.NoError(t, os.WriteFile(f, []byte(secret+"\n"), 0o600))
		return &hookapi.Client{URL: url, Secret: secretfile.New(f, nil)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in := hookapi.PrologRequest{Cluster: "c1", JobID: 1, WaitSeconds: 0.05}

	me := uint32(os.Getuid())
	st := readyRun()
	rep, err := client(serveSocket(t, &Server{Store: st}, func(uid uint32) bool { return uid == me })).Prolog(ctx, in)
	require.NoError(t, err)
	require.Equal(t, hookapi.OutcomeFailed, rep.Outcome, "served: the run's reservation failed")

	refused := &countingMetrics{}
	other := readyRun()
	_, err = client(serveSocket(t, &Server{Store: other, Metrics: refused}, func(uid uint32) bool { return uid != me })).Prolog(ctx, in)
	require.Error(t, err, "a uid that may not call is disconnected")
	require.Zero(t, other.reads.Load(), "its call never reached the store")
	require.Equal(t, 1, refused.refused("uid"))
}

// The hooks prove the listener by its socket's directory: one owned by another user than the listener's (and
// not root's) is refused before anything is sent.
func TestHooksRefuseASocketWhoseDirectoryIsAnotherUsers(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, to give the socket's directory to another user (CI runs as root)")
	}
	url := serveSocket(t, &Server{Store: readyRun()}, func(uint32) bool { return true })
	dir := filepath.Dir(hookapi.SocketPath(url))
	require.NoError(t, os.Chown(dir, 65534, 65534))
	_, err := hookapi.DialUnix(context.Background(), hookapi.SocketPath(url))
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "belongs to uid 65534"), err.Error())

	// Back to root's: root may serve in a directory of its own.
	require.NoError(t, os.Chown(dir, 0, 0))
	c, err := hookapi.DialUnix(context.Background(), hookapi.SocketPath(url))
	require.NoError(t, err)
	c.Close()
}

func netListenUnix(path string) (net.Listener, error) { return net.Listen("unix", path) }

// countingMetrics counts the refusals by limit.
type countingMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countingMetrics) ObserveHook(string, string)              {}
func (m *countingMetrics) ObservePrologWait(time.Duration, string) {}
func (m *countingMetrics) ObserveSlurm(string, error)              {}
func (m *countingMetrics) ObserveHookRefused(limit string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[limit]++
}

func (m *countingMetrics) refused(limit string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[limit]
}
