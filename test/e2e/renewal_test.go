//go:build e2e && tokenrenewal

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// The controller's slurmrestd token expires and is renewed under it: a test bed brought up with a short token
// lifespan (JUICE_TESTBED_TOKEN_LIFESPAN, e.g. 120 s) renews the token file every JUICE_TESTBED_TOKEN_RENEW seconds
// with deploy/juice-slurm-token-renew, as the systemd timer does at a site. For JUICE_E2E_RENEWAL_DURATION
// (default 10 minutes) Juice jobs run one after the other; every one must complete with its session, the
// controller must never fail a poll, and the token it uses must have changed several times.
//
//	make test-token-renewal      (-tags e2e,tokenrenewal; about 11 minutes, not in make test)
func TestTokenRenewalKeepsPolling(t *testing.T) {
	life, _ := strconv.Atoi(world.env.Get("JUICE_TESTBED_TOKEN_LIFESPAN"))
	every, _ := strconv.Atoi(world.env.Get("JUICE_TESTBED_TOKEN_RENEW"))
	if life <= 0 || life > 600 || every <= 0 {
		t.Fatalf("the test bed's token is not short-lived and renewed (JUICE_TESTBED_TOKEN_LIFESPAN=%q, "+
			"JUICE_TESTBED_TOKEN_RENEW=%q): bring it up with JUICE_TESTBED_TOKEN_LIFESPAN=120 (make test-token-renewal)",
			world.env.Get("JUICE_TESTBED_TOKEN_LIFESPAN"), world.env.Get("JUICE_TESTBED_TOKEN_RENEW"))
	}
	duration := 10 * time.Minute
	if d := os.Getenv("JUICE_E2E_RENEWAL_DURATION"); d != "" {
		var err error
		duration, err = time.ParseDuration(d)
		require.NoError(t, err, "JUICE_E2E_RENEWAL_DURATION")
	}
	require.Greater(t, duration, 2*time.Duration(life)*time.Second, "the run must outlast two lifespans of the token")

	s := openStore(t)
	metricsURL := metricsURLOf(t, hookAddr)
	errors0, ok0 := polls(t, metricsURL)
	// Each token the controller may have read: its expiry, as the file held it when looked at.
	expiries := map[time.Time]bool{}
	lookAtToken := func() {
		b, err := os.ReadFile(world.env.TokenFile())
		require.NoError(t, err)
		exp, ok := slurmrest.JWTExpiry(string(b))
		require.True(t, ok, "the token file holds no JWT with an expiry")
		require.True(t, time.Until(exp) > 0, "the token file holds an expired token (expired %s)", exp)
		require.LessOrEqual(t, time.Until(exp), time.Duration(life+5)*time.Second, "a token longer-lived than the lifespan")
		expiries[exp] = true
	}

	start := time.Now()
	var jobs []uint32
	for time.Since(start) < duration {
		lookAtToken()
		job := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", `test -n "$JUICE_SESSION_ID" || exit 42; sleep 3`)
		jobs = append(jobs, job)
		j := waitJobDone(t, job, 2*time.Minute)
		require.Equal(t, slurmrest.StateCompleted, j.State, "job %d at %s into the run", job, time.Since(start).Round(time.Second))
		require.Equal(t, 0, j.Run, "job %d was requeued (its prolog found no session in time)", job)
		waitFor(t, 30*time.Second, fmt.Sprintf("job %d released", job), func() bool {
			return stateOf(t, s, run(job, 0)) == reconcile.StateReleased
		})
		time.Sleep(10 * time.Second)
	}
	lookAtToken()
	errors1, ok1 := polls(t, metricsURL)
	t.Logf("%d jobs in %s; %d distinct tokens seen (lifespan %d s, renewed every %d s); polls: %.0f ok, %.0f failed",
		len(jobs), time.Since(start).Round(time.Second), len(expiries), life, every, ok1-ok0, errors1-errors0)
	require.Equal(t, errors0, errors1, "the controller failed %0.f polls of slurmrestd during the run", errors1-errors0)
	// The controller polls every 500 ms: most of the run must have been polled.
	require.Greater(t, ok1-ok0, duration.Seconds(), "too few successful polls")
	require.GreaterOrEqual(t, len(expiries), int(duration.Seconds())/every-1, "the token was not renewed as often as set")
	for _, job := range jobs {
		noLiveSession(t, s, job)
	}
}

// metricsURLOf is the controller's /metrics: the hook API's port + 1000 (its default).
func metricsURLOf(t *testing.T, hook string) string {
	host, port, err := net.SplitHostPort(hook)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	return "http://" + net.JoinHostPort(host, strconv.Itoa(p+1000)) + "/metrics"
}

// polls reads juice_slurm_polls_total{result="error"} and {result="ok"} from the controller's metrics.
func polls(t *testing.T, url string) (errors, ok float64) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		for label, into := range map[string]*float64{`result="error"`: &errors, `result="ok"`: &ok} {
			if strings.HasPrefix(line, "juice_slurm_polls_total{") && strings.Contains(line, label) {
				f := strings.Fields(line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				require.NoError(t, err, line)
				*into = v
			}
		}
	}
	require.NoError(t, sc.Err())
	return errors, ok
}
