package controller

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// flood opens n connections to addr as the user nobody and holds them, idle, until the test ends.
const flood = `
import socket, sys, time
addr, n = sys.argv[1].rsplit(":", 1), int(sys.argv[2])
held = []
for i in range(n):
    s = socket.socket()
    s.settimeout(10)
    s.connect((addr[0], int(addr[1])))
    held.append(s)
print(len(held), flush=True)
time.sleep(120)
`

// F4: one local user's 19,900 idle connections (as many as its descriptor limit allows) neither exhaust the
// controller's descriptors nor keep another user's prolog out: over its cap, a peer's connections are closed at
// once, and the peer is the uid owning the socket, so the flooder and slurmctld's hooks never share a cap.
func TestIdleConnectionFloodDoesNotStopAnotherUsersProlog(t *testing.T) {
	if os.Getuid() != 0 {
		testbed.Unavailable(t, "the flood runs as the user nobody: run as root")
	}
	h := newHarness(t)
	c, _ := h.startController("a", Config{MaxHookConnsPerPeer: 100})
	h.slurm.Set(fakeslurm.JuiceJob(90, 0, slurmrest.StateConfiguring, "juice:v1:pool=test,gpus=1"))
	before := openFDs(t)

	const n = 19900
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", flood, c.Listener.Addr().String(), fmt.Sprint(n))
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	floodStart := time.Now()
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the flooder did not open its connections")
	require.Equal(t, fmt.Sprint(n), strings.TrimSpace(line))

	// Another user's prolog (this process: root) is served, at once.
	start := time.Now()
	code, rep := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 90, WaitSeconds: 20})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, rep["outcome"], "%v", rep)
	t.Logf("prolog served in %s with %d idle connections held by nobody", time.Since(start).Round(time.Millisecond), n)
	require.Equal(t, reconcile.StateReady, h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 90}))

	held := openFDs(t) - before
	require.Less(t, held, 300, "the controller holds at most the flooder's cap (100) of its connections")
	// The kernel completes a connection's handshake before the server accepts it, so the flooder's connections wait
	// in the listen backlog and are refused as the accept loop reaches them, slowly on a loaded machine (a peer
	// lookup each). Meanwhile the 100 the flooder was let hold fail the 10 s TLS and header deadline and give their
	// places back, so each 10 s since the flood began lets at most 100 more be accepted rather than refused (seen:
	// 19,700 refused of 19,900 when the loop took more than 10 s).
	refusedSoFar := func() float64 {
		var m dto.Metric
		require.NoError(t, c.Metrics.hookRefused.WithLabelValues("connections").Write(&m))
		return m.GetCounter().GetValue()
	}
	atLeast := func() float64 { return float64(n - 100*(1+int(time.Since(floodStart)/(10*time.Second)))) }
	require.Eventually(t, func() bool { return refusedSoFar() >= atLeast() }, 60*time.Second, 50*time.Millisecond,
		"the flooder's connections over its cap were closed")
	t.Logf("refused %.0f of the flooder's %d connections", refusedSoFar(), n)
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(es)
}

// A peer's concurrent calls are capped too: over the cap it gets 429 (which the hooks retry), and a call from
// another peer is still served.
func TestWaitsPerPeerAreCapped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Only the prolog registers the jobs, and reading job 91 from slurmrestd hangs: two calls for it are two
	// calls in progress.
	var reading91 atomic.Int32
	h.slurm.Intercept(fakeslurm.Funcs{
		ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
			return slurmrest.JobList{LastUpdate: time.Now()}, nil
		},
		GetJob: func(c context.Context, id uint32, next func(context.Context, uint32) (*slurmrest.Job, error)) (*slurmrest.Job, error) {
			if id == 91 {
				reading91.Add(1)
				select {
				case <-c.Done():
				case <-ctx.Done():
				}
				return nil, context.Canceled
			}
			return next(c, id)
		}})
	h.slurm.Set(fakeslurm.JuiceJob(91, 0, slurmrest.StateConfiguring, "juice:v1:pool=test,gpus=1"),
		fakeslurm.JuiceJob(92, 0, slurmrest.StateConfiguring, "juice:v1:pool=test,gpus=1"))
	c, _ := h.startController("a", Config{MaxWaitsPerPeer: 2})
	for i := 0; i < 2; i++ {
		go func() {
			body := strings.NewReader(`{"cluster":"c1","job_id":91,"run":0,"wait_seconds":20}`)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.Listener.Addr().String()+"/v1/prolog", body)
			req.Header.Set("Authorization", "Bearer "+hookSecret)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	eventually(t, 10*time.Second, "both calls for job 91 in progress", func() bool { return reading91.Load() == 2 })
	// Once both waits are in, the same peer's third call is refused (before, it is served: job 92 is ready).
	eventually(t, 10*time.Second, "a third call of the same peer refused with 429", func() bool {
		code, _ := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 92, WaitSeconds: 5})
		return code == http.StatusTooManyRequests
	})
	code := http.StatusTooManyRequests
	require.False(t, hookapi.IsPermanent(&hookapi.HTTPError{Code: code}), "the hooks retry a 429")
}
