package controller

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookserver"
	"github.com/juice-slurm/juice-slurm/controller/licenses"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
)

// A failing license sync shows in the leader's /readyz as a warning: the replica stays ready, since licenses
// never hold back the hooks or the reservations.
func TestLicenseFailureIsAWarningNotUnready(t *testing.T) {
	c := &Controller{Metrics: NewMetrics(nil)}
	mux := http.NewServeMux()
	hookserver.Probes(mux, func(context.Context) error { return nil }, c.warning)
	readyz := func() (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	c.setLeading(true)
	code, body := readyz()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	c.health.set(&c.health.licenses, errors.New("/usr/bin/sacctmgr -n -P show resource: exit status 1: Connection refused"))
	code, body = readyz()
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\nwarning: leader: licenses: /usr/bin/sacctmgr -n -P show resource: exit status 1: Connection refused\n", body)
	c.setLeading(false)
	_, body = readyz()
	require.Equal(t, "ok\n", body, "a replica that stopped leading has no license sync")
	c.setLeading(true)
	_, body = readyz()
	require.Equal(t, "ok\n", body, "a new term starts with no word from the license sync")
	c.setLeading(false)
	c.health.set(&c.health.licenses, errors.New("late word of a term that ended"))
	_, body = readyz()
	require.Equal(t, "ok\n", body, "only the leader's license sync is reported")
}

// The leader's license sync serves the policy's pools, writes through the configured sacctmgr, every ready check.
func TestLicenseSyncerIsConfigured(t *testing.T) {
	c := &Controller{Config: Config{Cluster: "c1", Licenses: true, Policy: &policy.Policy{Pools: []string{"demo", "test"}}}, Metrics: NewMetrics(nil)}
	c.Config.defaults()
	s := c.licenseSyncer()
	require.Equal(t, []string{"demo", "test"}, s.Pools)
	require.Equal(t, "c1", s.Cluster)
	require.Equal(t, licenses.Exec{Path: "/usr/bin/sacctmgr"}, s.Sacctmgr)
	require.Equal(t, 30*time.Second, s.Period)
	s.Health(errors.New("x"))
	require.EqualError(t, c.health.licenses, "x")
	require.NotNil(t, c.licenseSync())
	c.Config.Licenses = false
	require.Nil(t, c.licenseSync(), "licenses off: no term runs the sync")
}
