package controller

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// samples gathers a metric family from c's registry as "label=value,..." → value.
func samples(t *testing.T, c *Controller, name string) map[string]float64 {
	t.Helper()
	fams, err := c.Metrics.Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[strings.Join(labels, ",")] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// The reservations gauge counts the open reservations of this cluster only, from the leader only: not the
// history of ended runs, not another cluster's rows, and not twice when two replicas are scraped.
func TestReservationsGaugeIsTheLeadersOpenCount(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	// History: a released run of this cluster, and an open run of another cluster in the same database.
	old := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 1}, request.Request{Pool: "test", GPUs: 1})
	tr, err := reconcile.Apply(&old, reconcile.EventUnwanted, "test", time.Now())
	require.NoError(t, err)
	require.NoError(t, h.store.SaveStatus(ctx, &old, tr))
	other := store.New(h.pool, "c2")
	_, _, err = other.EnsureRun(ctx, reconcile.NewReservation{Run: reconcile.RunID{Cluster: "c2", JobID: 9},
		Request: request.Request{Pool: "test", GPUs: 1}})
	require.NoError(t, err)

	h.slurm.Set(fakeslurm.JuiceJob(2, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
	a, _ := h.startController("a", Config{})
	eventually(t, 10*time.Second, "job 2 ready", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 2}) == reconcile.StateReady
	})
	b, _ := h.startController("b", Config{})
	eventually(t, 10*time.Second, "the gauge shows job 2's reservation", func() bool {
		return samples(t, a, "juice_slurm_reservations")["pool=test,state=ready"] == 1
	})
	got := samples(t, a, "juice_slurm_reservations")
	require.Equal(t, map[string]float64{"pool=test,state=pending": 0, "pool=test,state=requesting": 0,
		"pool=test,state=waiting": 0, "pool=test,state=ready": 1, "pool=test,state=releasing": 0}, got,
		"open states only, this cluster only")
	require.Empty(t, samples(t, b, "juice_slurm_reservations"), "a replica that does not lead exports no count")
	require.Len(t, samples(t, a, "juice_slurm_queue_depth"), 2, "the leader's two queues")
	require.Empty(t, samples(t, b, "juice_slurm_queue_depth"))
	require.Greater(t, samples(t, a, "juice_slurm_last_successful_poll_timestamp_seconds")[""], float64(time.Now().Add(-time.Minute).Unix()))
	require.Len(t, samples(t, a, "juice_slurm_build_info"), 1)
	counts, err := h.store.OpenCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, []store.Count{{Pool: "test", State: reconcile.StateReady, N: 1}}, counts)

	// The job ends: the pool stays, at zero, so the drop shows.
	h.slurm.Remove(2)
	eventually(t, 10*time.Second, "released", func() bool {
		return h.stateOf(reconcile.RunID{Cluster: "c1", JobID: 2}) == reconcile.StateReleased
	})
	require.Equal(t, float64(0), samples(t, a, "juice_slurm_reservations")["pool=test,state=ready"])
}

// Hook calls are counted by outcome, refusals included.
func TestHookRequestsAreCountedByOutcome(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.slurm.Set(fakeslurm.JuiceJob(3, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
	c, _ := h.startController("a", Config{})
	code, _ := post(t, c, "/v1/prolog", "wrong-secret", hookapi.PrologRequest{Cluster: "c1", JobID: 3})
	require.Equal(t, http.StatusUnauthorized, code)
	code, _ = post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "other", JobID: 3})
	require.Equal(t, http.StatusBadRequest, code)
	code, out := post(t, c, "/v1/prolog", hookSecret, hookapi.PrologRequest{Cluster: "c1", JobID: 3, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, hookapi.OutcomeReady, out["outcome"])
	code, out = post(t, c, "/v1/epilog", hookSecret, hookapi.EpilogRequest{Cluster: "c1", JobID: 3, WaitSeconds: 10})
	require.Equal(t, http.StatusOK, code)
	outcome, _ := out["outcome"].(string) // nobody else waits for the pool: answered at once, released or not yet
	require.Contains(t, []string{hookapi.OutcomeWaiting, hookapi.OutcomeReleased}, outcome)
	require.Equal(t, map[string]float64{"hook=prolog,outcome=unauthorized": 1, "hook=prolog,outcome=bad_request": 1,
		"hook=prolog,outcome=ready": 1, "hook=epilog,outcome=" + outcome: 1}, samples(t, c, "juice_slurm_hook_requests_total"))
}

// /readyz: a replica needs its database; the leader also needs slurmrestd, and says so while its polls fail.
func TestReadyzReflectsWhatTheLeaderNeeds(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	a, _ := h.startController("a", Config{})
	readyz := func(c *Controller) (int, string) {
		resp, err := http.Get("http://" + c.MetricsListener.Addr().String() + "/readyz")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	eventually(t, 10*time.Second, "a leads", func() bool { return samples(t, a, "juice_slurm_leader")[""] == 1 })
	b, _ := h.startController("b", Config{})
	code, body := readyz(a)
	require.Equal(t, http.StatusOK, code, body)

	h.slurm.Intercept(fakeslurm.Funcs{ListJobs: func(context.Context, time.Time, func(context.Context, time.Time) (slurmrest.JobList, error)) (slurmrest.JobList, error) {
		return slurmrest.JobList{}, errors.New("slurmrestd: connection refused")
	}})
	eventually(t, 10*time.Second, "the leader unready", func() bool {
		code, body = readyz(a)
		return code == http.StatusServiceUnavailable
	})
	require.Contains(t, body, "slurmrestd: connection refused")
	code, body = readyz(b)
	require.Equal(t, http.StatusOK, code, "a replica that does not lead serves hooks from the database alone: %s", body)

	h.slurm.Intercept(fakeslurm.Funcs{})
	eventually(t, 10*time.Second, "the leader ready again", func() bool { code, _ := readyz(a); return code == http.StatusOK })
}

// The dashboard and the alert rules name only metrics the controller exports (a renamed metric would leave a
// panel empty and an alert silent).
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	m := NewMetrics(store.New(nil, "x"))
	m.WatchTokenExpiry("slurmrestd", func() (string, error) { return "", nil })
	exported := map[string]bool{}
	for _, n := range m.Names() {
		exported[n] = true
	}
	require.True(t, exported["juice_slurm_reservations"] && exported["juice_slurm_token_expiry_timestamp_seconds"])
	name := regexp.MustCompile(`juice_slurm_[a-z_]+`)
	known := func(n string) bool {
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && exported[base] {
				return true
			}
		}
		return false
	}
	b, err := os.ReadFile("../deploy/monitoring/juice-slurm-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash), "the dashboard is JSON")
	require.Equal(t, "juice-slurm", dash.UID)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			names := name.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, names, "panel %q: %s", p.Title, tg.Expr)
			for _, n := range names {
				require.True(t, known(n), "panel %q names %s, which the controller does not export", p.Title, n)
				used[n] = true
			}
		}
	}
	rules, err := os.ReadFile("../deploy/monitoring/juice-slurm-alerts.yml")
	require.NoError(t, err)
	for _, n := range name.FindAllString(string(rules), -1) {
		require.True(t, known(n), "the alert rules name %s, which the controller does not export", n)
	}
	require.Greater(t, len(used), 12, "the dashboard shows most of the metrics")
}

// The alert rules are valid and their unit tests pass, by Prometheus's own promtool.
func TestAlertRulesPassPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testbed.Unavailable(t, "promtool is not installed (Debian package prometheus; test/testbed.sh up installs it)")
	}
	for _, args := range [][]string{{"check", "rules", "juice-slurm-alerts.yml"}, {"test", "rules", "juice-slurm-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "../deploy/monitoring"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	}
}

// The leader prunes the runs that ended longer than the retention ago as soon as it leads, and counts them.
func TestLeaderPrunesEndedRuns(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	old := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 1}, request.Request{Pool: "test", GPUs: 1})
	tr, err := reconcile.Apply(&old, reconcile.EventUnwanted, "test", time.Now())
	require.NoError(t, err)
	require.NoError(t, h.store.SaveStatus(ctx, &old, tr))
	_, err = h.pool.Exec(ctx, `UPDATE juice_reservations SET updated_at = now() - interval '2 hours' WHERE id = $1`, old.ID)
	require.NoError(t, err)
	kept := h.ensure(reconcile.RunID{Cluster: "c1", JobID: 2}, request.Request{Pool: "test", GPUs: 1})
	tr, err = reconcile.Apply(&kept, reconcile.EventUnwanted, "test", time.Now())
	require.NoError(t, err)
	require.NoError(t, h.store.SaveStatus(ctx, &kept, tr))

	c, _ := h.startController("a", Config{Retention: time.Hour})
	eventually(t, 10*time.Second, "the old run pruned", func() bool {
		_, err := h.store.Get(ctx, old.ID)
		return errors.Is(err, reconcile.ErrNotFound)
	})
	_, err = h.store.Get(ctx, kept.ID)
	require.NoError(t, err, "a run that ended within the retention is kept")
	eventually(t, 5*time.Second, "counted", func() bool {
		return samples(t, c, "juice_slurm_pruned_reservations_total")[""] == 1 &&
			samples(t, c, "juice_slurm_prunes_total")["result=ok"] >= 1
	})
}

// A collector that reads its values at scrape time and fails (the reservations gauge during a PostgreSQL
// failover, an unreadable token file) leaves out its own series and counts the error: the rest of the scrape is
// served, so the alerts on this replica, the one on juice_slurm_collector_errors_total too, keep working.
func TestFailingCollectorDropsOnlyItsSeries(t *testing.T) {
	m := NewMetrics(nil)
	m.watchReservations(func(context.Context) ([]store.Count, error) {
		return nil, errors.New("connection refused: the primary is failing over")
	})
	m.WatchTokenExpiry("slurmrestd", func() (string, error) {
		return "", errors.New("open /etc/juice-slurm/slurmrestd.token: permission denied")
	})
	m.setLeader(true)
	// The handler as the metrics listener builds it (hookserver.go).
	srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	scrape := func() string {
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "a failing collector must not fail the scrape:\n%s", b)
		return string(b)
	}
	scrape()
	body := scrape()
	require.Contains(t, body, "\njuice_slurm_leader 1\n", "the other series are served")
	require.NotContains(t, body, "\njuice_slurm_reservations{", "the failed gauge is left out, not served stale or zero")
	require.NotContains(t, body, "\njuice_slurm_token_expiry_timestamp_seconds{")
	require.Contains(t, body, "\njuice_slurm_collector_errors_total{collector=\"reservations\"} ")
	require.Regexp(t, `\njuice_slurm_collector_errors_total\{collector="reservations"\} [1-9]`, body)
	require.Regexp(t, `\njuice_slurm_collector_errors_total\{collector="token_slurmrestd"\} [1-9]`, body)
}

// A prune that fails counts as one failed prune, whatever it deleted before the error; the rows it did delete
// are counted as deleted. A prune cut short because the replica stopped leading is no failure.
func TestPruneFailuresAreCounted(t *testing.T) {
	m := NewMetrics(nil)
	m.ObservePrune(0, errors.New("prune reservations: connection refused"))
	m.ObservePrune(2000, errors.New("prune reservations: connection reset"))
	m.ObservePrune(5, nil)
	m.ObservePrune(0, context.Canceled)
	require.Equal(t, float64(2), counted(t, m.prunes.WithLabelValues("error")))
	require.Equal(t, float64(1), counted(t, m.prunes.WithLabelValues("ok")))
	require.Equal(t, float64(2005), counted(t, m.pruned))
}

func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return value(&m)
}
