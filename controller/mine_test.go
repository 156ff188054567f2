package controller

import (
	"context"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/request"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// mungeAs makes a MUNGE credential as user (root: as this process), with the test bed's munged.
func mungeAs(t *testing.T, user string) string {
	t.Helper()
	cmd := exec.Command("/usr/bin/munge", "-n")
	if user != "root" {
		cmd = exec.Command("setpriv", "--reuid="+user, "--regid=nogroup", "--clear-groups", "/usr/bin/munge", "-n")
	}
	out, err := cmd.Output()
	if err != nil {
		testbed.Unavailable(t, "munge -n as %s: %v (munged is part of the test bed)", user, err)
	}
	return string(out)
}

// POST /v1/mine answers the runs of the user a MUNGE credential names, and nobody else's; no credential, a
// forged one or one used before gets nothing.
func TestMineShowsOnlyTheCallersRuns(t *testing.T) {
	h := newHarness(t)
	req := request.Request{Pool: "test", GPUs: 1}
	_, err := h.store.Ensure(context.Background(), []reconcile.NewReservation{
		{Run: reconcile.RunID{Cluster: "c1", JobID: 81}, Request: req, UserName: "root", JobState: "PENDING", Reason: "seen by the test"},
		{Run: reconcile.RunID{Cluster: "c1", JobID: 82}, Request: req, UserName: "nobody", JobState: "PENDING", Reason: "seen by the test"},
	})
	require.NoError(t, err)
	c, _ := h.startController("a", Config{Unmunge: "/usr/bin/unmunge"})
	client := &hookapi.Client{URL: "http://" + c.Listener.Addr().String()}
	ctx := context.Background()

	rootCred := mungeAs(t, "root")
	rep, err := client.Mine(ctx, rootCred)
	require.NoError(t, err)
	require.Equal(t, "root", rep.User)
	require.Len(t, rep.Runs, 1)
	require.Equal(t, uint32(81), rep.Runs[0].JobID)
	require.Equal(t, "juice:v1:pool=test,gpus=1", rep.Runs[0].Request)
	require.NotEmpty(t, rep.Runs[0].Events, "the run's history")
	require.Equal(t, "created", rep.Runs[0].Events[0].Event)

	rep, err = client.Mine(ctx, mungeAs(t, "nobody"))
	require.NoError(t, err)
	require.Equal(t, "nobody", rep.User)
	require.Len(t, rep.Runs, 1)
	require.Equal(t, uint32(82), rep.Runs[0].JobID)

	for name, cred := range map[string]string{"replayed": rootCred, "forged": "MUNGE:AwQFAAB+forged+credential:", "empty": ""} {
		_, err := client.Mine(ctx, cred)
		var he *hookapi.HTTPError
		require.ErrorAs(t, err, &he, name)
		require.Equal(t, 401, he.Code, name)
	}
	// The hook secret is not a way in.
	_, err = (&hookapi.Client{URL: client.URL}).Mine(ctx, hookSecret)
	require.Error(t, err)
}
