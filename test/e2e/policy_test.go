//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Issue 13 item 8 on the real Slurm: a pool's own limits in the site policy the test bed wires
// (test/testbed/juice-policy.extra: pool "lab" serves only account physics in partition debug, one GPU per job).
// A job of another account, of no account, of another partition or over the pool's per-job limit is refused at
// the prompt by job_submit.lua with a message naming the value and the limit, and no job is created; a job of
// account physics in the default partition (job_submit.lua finds which it is) is queued, and the controller,
// which applies the same file to the account and partition slurmrestd reports, serves it.
func TestPoolLimitsAtThePrompt(t *testing.T) {
	if legacyMode() {
		t.Skip("pool lab is juice-sim's (the legacy controller's pools are its own): run without JUICE_E2E_JUICE=legacy")
	}
	s := openStore(t)
	for i, tc := range []struct {
		args []string
		msg  []string
	}{
		{[]string{"--account=chem", "--juice-pool=lab"}, []string{`account "chem"`, `pool "lab"`, "its accounts: physics"}},
		// No --account: with accounting slurmctld fills in the user's default account (root's is root) before
		// job_submit.lua runs; without, there is none.
		{[]string{"--juice-pool=lab"}, []string{fmt.Sprintf("account %q", defaultAccount()), `pool "lab"`}},
		{[]string{"--account=physics", "--juice-pool=lab", "--juice-gpu-count=2"},
			[]string{"2 GPUs asked for, at most 1 allowed per job in pool \"lab\""}},
		// job_submit.lua runs before slurmctld looks the partition up: the site's limit speaks first.
		{[]string{"--account=physics", "--juice-pool=lab", "--partition=nosuch"},
			[]string{`partition "nosuch"`, `pool "lab"`, "its partitions: debug"}},
	} {
		name := fmt.Sprintf("e2e-policy-%d-%d", time.Now().UnixNano()%1e6, i)
		out, code := slurm(t, 30*time.Second, "sbatch", append([]string{"--job-name=" + name, "--wrap=true"}, tc.args...)...)
		require.NotEqual(t, 0, code, "sbatch %v was accepted:\n%s", tc.args, out)
		require.Contains(t, out, "juice: ", "sbatch %v", tc.args)
		require.Contains(t, out, "the site's limit on", "sbatch %v", tc.args)
		for _, m := range tc.msg {
			require.Contains(t, out, m, "sbatch %v: the message names the value and the limit", tc.args)
		}
		q, _ := slurm(t, 10*time.Second, "squeue", "-h", "--states=all", "-n", name, "-o", "%i")
		require.Empty(t, strings.TrimSpace(q), "sbatch %v created a job", tc.args)
	}

	// Account physics may use the pool: queued, served by the controller, released.
	outFile := filepath.Join(world.dir, "policy-allowed.out")
	job := sbatch(t, "--account=physics", "--juice-pool=lab", "-o", world.env.JobPath(outFile), "--wrap=env")
	j := waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, "physics", j.Account, "slurmrestd reports the job's account")
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "JUICE_POOL=lab\n")
	require.Contains(t, string(b), "JUICE_GPU_COUNT=1\n")
	r, err := s.ForRun(context.Background(), run(job, 0))
	require.NoError(t, err)
	require.Equal(t, "physics", r.Account, "the run's account is recorded for the policy and the report")
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// defaultAccount is the account of a job of root's submitted without --account, as job_submit.lua sees it.
func defaultAccount() string {
	if licensed() { // the bed has accounting, and root an association with default account root
		return "root"
	}
	return ""
}

// capsInSlurm reports whether the bed's controllers keep the policy's per-user caps as Slurm's own limits
// (caps-qos, with AccountingStorageEnforce=limits): every bed with licenses does.
func capsInSlurm() bool { return licensed() && world.env.Get("JUICE_TESTBED_CAPS_QOS") != "" }

// qosCapReason is a pending job's reason when its QOS's MaxTRESPerUser on a license keeps it waiting, as 22.05,
// 24.11 and 26.05 name it.
const qosCapReason = "QOSMaxLicensePerUser"

// Issue 13 item 8 and issue 23 (f) on the real Slurm: a pool's cap on one user's GPUs (pool "lab": 1 per user,
// though it has 2). While a user's job holds the GPU of the cap, the same user's next job is not asked of the
// Juice Controller and does not fail. With the cap as Slurm's limit (caps-qos) the job stays PENDING in Slurm's
// queue with Slurm's reason, holding no node; without it, Slurm starts it and its run waits in the controller,
// with the reason in its history and its status. Once the first job ends, the second is served.
func TestUserCapMakesTheNextRunWait(t *testing.T) {
	if legacyMode() {
		t.Skip("pool lab is juice-sim's (the legacy controller's pools are its own): run without JUICE_E2E_JUICE=legacy")
	}
	ctx := context.Background()
	s := openStore(t)
	if capsInSlurm() {
		// The cap is taken off by hand first: the controller (its license sync, every 30 s) must put it back.
		qos := world.env.Get("JUICE_TESTBED_CAPS_QOS")
		out, code := slurm(t, 10*time.Second, "sacctmgr", "-i", "modify", "qos", "where", "name="+qos, "set", "MaxTRESPerUser=license/juice_lab@juice=-1")
		require.Equal(t, 0, code, out)
		waitFor(t, 90*time.Second, "the controller puts pool lab's cap back on QOS "+qos, func() bool {
			out, _ := slurm(t, 10*time.Second, "sacctmgr", "-nP", "show", "qos", "where", "name="+qos, "format=maxtrespu")
			return strings.Contains(out, "license/juice_lab@juice=1")
		})
	}
	holder := sbatch(t, "--account=physics", "--juice-pool=lab", "-o", "/dev/null", "--wrap", "sleep 300")
	defer slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(holder)))
	waitFor(t, 60*time.Second, "the holder's session is ready", func() bool { return stateOf(t, s, run(holder, 0)) == reconcile.StateReady })

	outFile := filepath.Join(world.dir, "usercap.out")
	job := sbatch(t, "--account=physics", "--juice-pool=lab", "-o", world.env.JobPath(outFile), "--wrap", "env")
	if capsInSlurm() {
		var last *slurmrest.Job
		waitFor(t, 30*time.Second, "the second job pends for its user's cap in Slurm", func() bool {
			last = getJob(t, job)
			return last.State == slurmrest.StatePending && last.StateReason == qosCapReason
		})
		t.Logf("job %d pending: %s", job, last.StateReason)
		// It stays so while the holder runs, though the pool's license has a GPU free: Slurm's cap, not the count.
		for i := 0; i < 6; i++ {
			time.Sleep(time.Second)
			j := getJob(t, job)
			require.Equal(t, slurmrest.StatePending, j.State, "the job over its user's cap started (reason was %s)", last.StateReason)
		}
		require.GreaterOrEqual(t, licenseTotal(t, "lab"), 2, "the license had room: only the cap kept the job")
		rs, err := s.ForJob(ctx, job)
		require.NoError(t, err)
		for _, r := range rs {
			require.NotEqual(t, reconcile.StateReady, r.Status.State, "a job Slurm keeps for its cap got a session")
		}
	} else {
		var waiting reconcile.Reservation
		waitFor(t, 60*time.Second, "the second run waits for its user's cap", func() bool {
			rs, err := s.ForJob(ctx, job)
			require.NoError(t, err)
			for _, r := range rs {
				if policy.IsWait(r.Status.Reason) {
					waiting = r
					return true
				}
			}
			return false
		})
		require.Equal(t, reconcile.StatePending, waiting.Status.State, "a waiting run is not asked of the Juice Controller")
		require.Contains(t, waiting.Status.Reason, "at most 1 at once (max_gpus_per_user)")
		require.Contains(t, waiting.Status.Reason, "pool lab")
		evs, err := s.Events(ctx, waiting.ID)
		require.NoError(t, err)
		for _, e := range evs {
			require.NotEqual(t, reconcile.EventRequest, e.Event, "the waiting run was asked for while its user was at the cap")
		}
	}
	require.Equal(t, reconcile.StateReady, stateOf(t, s, run(holder, 0)), "the holder keeps its session")

	_, code := slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(holder)))
	require.Equal(t, 0, code)
	j := waitJobDone(t, job, 4*time.Minute)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	if capsInSlurm() {
		require.Zero(t, j.Run, "a job Slurm kept for its cap is never requeued")
	}
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "JUICE_POOL=lab\n")
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))
	noLiveSession(t, s, holder)
	noLiveSession(t, s, job)
}

// juice-slurm report on a run the real Slurm ran: its GPU-hours are its GPUs × the time from ready to released,
// as the reservation records them, under its account; a whole GPU of pool "test" (no gpu_vram in the wired
// policy) counts apart from VRAM-GiB-hours.
func TestReportOfARealRun(t *testing.T) {
	s := openStore(t)
	start := time.Now().Add(-time.Minute)
	outFile := filepath.Join(world.dir, "report-run.out")
	job := sbatch(t, "--account=ml", "--juice-pool=test", "--juice-gpu-count=2", "-o", world.env.JobPath(outFile), "--wrap=sleep 1")
	require.Equal(t, slurmrest.StateCompleted, waitJobDone(t, job, 90*time.Second).State)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	r, err := s.ForRun(context.Background(), run(job, 0))
	require.NoError(t, err)
	require.Equal(t, "ml", r.Account)
	held := r.Status.UpdatedAt.Sub(r.Status.ReadyAt)
	require.Greater(t, held, time.Second, "the session was held while the job slept")

	out, code := slurmless(t, filepath.Join(world.repo, "bin/juice-slurm"), "report", "--config=", "--database-url", world.dbURL,
		"--cluster", world.env.Cluster(), "--policy", world.env.PolicyFile(), "--since", start.UTC().Format(time.RFC3339Nano),
		"--by", "account", "--format", "json")
	require.Equal(t, 0, code, out)
	var rep struct {
		Rows []struct {
			Key               string  `json:"key"`
			Runs              int     `json:"runs"`
			GPUHours          float64 `json:"gpu_hours"`
			VRAMGiBHours      float64 `json:"vram_gib_hours"`
			UnknownVRAMGPUHrs float64 `json:"unknown_vram_gpu_hours"`
		} `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	var found bool
	for _, row := range rep.Rows {
		if row.Key != "ml" {
			continue
		}
		found = true
		require.Equal(t, 1, row.Runs, out)
		require.InDelta(t, 2*held.Hours(), row.GPUHours, 1e-6, out)
		require.InDelta(t, 2*held.Hours(), row.UnknownVRAMGPUHrs, 1e-6, out)
		require.Zero(t, row.VRAMGiBHours, out)
	}
	require.True(t, found, "no row for account ml: %s", out)
}

// slurmless runs a command of this checkout on the host (not a Slurm client): its combined output and exit status.
func slurmless(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return runBounded(t, ctx, exec.CommandContext(ctx, name, args...), 30*time.Second)
}
