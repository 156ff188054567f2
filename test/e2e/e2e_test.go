//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// slurmClients are the commands that must be the test bed's own release's (inside a chroot test bed's chroot).
var slurmClients = map[string]bool{"srun": true, "sbatch": true, "salloc": true, "squeue": true, "scancel": true,
	"scontrol": true, "sinfo": true, "sacct": true, "sprio": true, "sstat": true}

// sh runs a command with a bound, returning its combined output and exit code: a Slurm client as slurm does,
// anything else on the host.
func sh(t *testing.T, within time.Duration, name string, args ...string) (string, int) {
	t.Helper()
	if slurmClients[name] {
		return slurm(t, within, name, args...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c := exec.CommandContext(ctx, name, args...)
	c.Dir = os.TempDir()
	c.Env = testbed.CleanEnv()
	return runBounded(t, ctx, c, within)
}

// slurm runs a Slurm client of the test bed's release (srun, sbatch, squeue...) like sh.
func slurm(t *testing.T, within time.Duration, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	c := world.env.Command(ctx, name, jobPaths(args)...)
	c.Dir = os.TempDir()
	return runBounded(t, ctx, c, within)
}

// jobPaths names the suite's own files (under world.dir) as jobs see them (testbed.Env.JobPath): the same on the
// host, inside the chroot for a chroot test bed.
func jobPaths(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		if world.dir != "" && strings.HasPrefix(a, world.dir+"/") {
			out[i] = world.env.JobPath(a)
		}
	}
	return out
}

func runBounded(t *testing.T, ctx context.Context, c *exec.Cmd, within time.Duration) (string, int) {
	t.Helper()
	name, args := c.Path, c.Args[1:]
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %s: still running after %s:\n%s", name, strings.Join(args, " "), within, out)
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	}
	return string(out), 0
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), world.dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return store.New(pool, world.env.Cluster())
}

func run(job uint32, r int) reconcile.RunID {
	return reconcile.RunID{Cluster: world.env.Cluster(), JobID: job, Run: r}
}

func stateOf(t *testing.T, s *store.Store, id reconcile.RunID) reconcile.State {
	r, err := s.ForRun(context.Background(), id)
	if err != nil {
		return ""
	}
	return r.Status.State
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getJob(t *testing.T, id uint32) *slurmrest.Job {
	t.Helper()
	j, err := world.slurm.GetJob(context.Background(), id)
	require.NoError(t, err)
	return j
}

func waitJobDone(t *testing.T, id uint32, within time.Duration) *slurmrest.Job {
	t.Helper()
	var j *slurmrest.Job
	waitFor(t, within, fmt.Sprintf("job %d finishes", id), func() bool {
		j = getJob(t, id)
		return j.State.IsFinished()
	})
	return j
}

func sbatch(t *testing.T, args ...string) uint32 {
	t.Helper()
	out, code := slurm(t, 30*time.Second, "sbatch", append([]string{"--parsable"}, args...)...)
	require.Equal(t, 0, code, "sbatch %v: %s", args, out)
	id, err := strconv.ParseUint(strings.TrimSpace(strings.Split(out, ";")[0]), 10, 32)
	require.NoError(t, err, out)
	return uint32(id)
}

// nodeCount is how many compute nodes the test bed has.
func nodeCount() int {
	return max(1, len(world.env.Nodes()))
}

func jobIDFrom(t *testing.T, out string) uint32 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^SLURM_JOB_ID=(\d+)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no SLURM_JOB_ID in:\n%s", out)
	id, _ := strconv.ParseUint(m[1], 10, 32)
	return uint32(id)
}

// noLiveSession asserts that the simulator holds no session for the job's runs.
func noLiveSession(t *testing.T, s *store.Store, job uint32) {
	t.Helper()
	rs, err := s.ForJob(context.Background(), job)
	require.NoError(t, err)
	ours := map[string]bool{}
	for _, r := range rs {
		ours[r.ID.String()] = true
	}
	waitFor(t, 15*time.Second, fmt.Sprintf("job %d's sessions are all closed", job), func() bool {
		for _, ss := range simSessions(t) {
			if ours[ss.IdempotencyKey] && !ss.Ended() {
				return false
			}
		}
		return true
	})
}

func TestOptionsListedInHelp(t *testing.T) {
	for _, cmd := range []string{"srun", "sbatch", "salloc"} {
		out, _ := slurm(t, 20*time.Second, cmd, "--help")
		for _, opt := range []string{"--juice-pool", "--juice-gpu-count", "--juice-vram"} {
			require.Contains(t, out, opt, "%s --help", cmd)
		}
	}
}

// Each bad value is refused at the prompt with a message naming it, and no job is created.
func TestBadValuesAreRefusedBeforeSubmission(t *testing.T) {
	for i, tc := range []struct {
		cmd  string
		args []string
		msg  string
	}{
		{"srun", []string{"--juice-pool=test", "--juice-gpu-count=0"}, `"0"`},
		{"srun", []string{"--juice-pool=test", "--juice-gpu-count=-2"}, `"-2"`},
		{"srun", []string{"--juice-pool=test", "--juice-gpu-count=two"}, `"two"`},
		{"srun", []string{"--juice-pool=test", "--juice-gpu-count=99"}, `"99"`},
		{"srun", []string{"--juice-pool=te st"}, `"te st"`},
		{"srun", []string{"--juice-pool=test", "--juice-vram=0"}, `"0"`},
		{"srun", []string{"--juice-pool=test", "--juice-vram=500GiB"}, `"500GiB"`},
		{"srun", []string{"--juice-pool=test", "--juice-vram=1.5xyz"}, `"1.5xyz"`},
		{"srun", []string{"--juice-pool=test", "--juice-gpu-count=2", "--juice-vram=1"}, "juice-vram"},
		{"srun", []string{"--juice-gpu-count=2"}, "juice-pool"},
		{"sbatch", []string{"--juice-pool=test", "--juice-gpu-count=0", "--wrap=true"}, `"0"`},
		{"salloc", []string{"--juice-pool=test", "--juice-vram=-1", "true"}, `"-1"`},
	} {
		name := fmt.Sprintf("e2e-bad-%d-%d", time.Now().UnixNano()%1e6, i)
		args := append([]string{"--job-name=" + name}, tc.args...)
		if tc.cmd == "srun" {
			args = append(args, "true")
		}
		out, code := slurm(t, 30*time.Second, tc.cmd, args...)
		require.NotEqual(t, 0, code, "%s %v was accepted:\n%s", tc.cmd, tc.args, out)
		require.Contains(t, out, "juice", "%s %v", tc.cmd, tc.args)
		require.Contains(t, out, tc.msg, "%s %v: the message names the value", tc.cmd, tc.args)
		q, _ := slurm(t, 10*time.Second, "squeue", "-h", "--states=all", "-n", name, "-o", "%i")
		require.Empty(t, strings.TrimSpace(q), "%s %v created a job", tc.cmd, tc.args)
	}
}

// srun with two GPUs: the job's tasks see their session, and the session is released when the job ends.
func TestSrunGetsTwoGPUs(t *testing.T) {
	s := openStore(t)
	out, code := slurm(t, 90*time.Second, "srun", "--juice-pool=test", "--juice-gpu-count=2", "env")
	require.Equal(t, 0, code, out)
	job := jobIDFrom(t, out)
	require.Contains(t, out, "JUICE_GPU_COUNT=2")
	require.Contains(t, out, "JUICE_POOL=test")
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, out)
	require.Regexp(t, `(?m)^JUICE_CFG_OVERRIDE=\{"id":`, out)
	require.Contains(t, out, "JUICE_BIN=")
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// The acceptance case: sbatch with a VRAM slice writes the session environment into its output file.
func TestSbatchVRAMSliceWritesSessionEnv(t *testing.T) {
	s := openStore(t)
	outFile := filepath.Join(world.dir, "sbatch-vram.out")
	job := sbatch(t, "--juice-pool=test", "--juice-vram=1.5", "-o", world.env.JobPath(outFile), "--wrap", "env")
	j := waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, "juice:v1:pool=test,gpus=1,vram=1610612736", j.AdminComment)
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "JUICE_VRAM=1610612736")
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

func TestSallocGetsItsSession(t *testing.T) {
	s := openStore(t)
	out, code := slurm(t, 90*time.Second, "salloc", "--juice-pool=test", "--juice-gpu-count=1", "srun", "env")
	require.Equal(t, 0, code, out)
	job := jobIDFrom(t, out)
	require.Contains(t, out, "JUICE_GPU_COUNT=1")
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, out)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// A user who types the request into --comment gets nothing: only admin_comment, written by job_submit.lua from
// the plugin's options, is trusted.
func TestForgedCommentIsIgnored(t *testing.T) {
	s := openStore(t)
	outFile := filepath.Join(world.dir, "forged.out")
	job := sbatch(t, "--comment=juice:v1:pool=test,gpus=1", "-o", world.env.JobPath(outFile), "--wrap", "env")
	j := waitJobDone(t, job, 60*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Empty(t, j.AdminComment)
	b, _ := os.ReadFile(outFile)
	require.NotContains(t, string(b), "JUICE_SESSION_ID")
	rs, err := s.ForJob(context.Background(), job)
	require.NoError(t, err)
	require.Empty(t, rs)
}

// While PENDING the request is visible through slurmrestd; a job cancelled while pending has its session
// released.
func TestPendingRequestVisibleAndCancelReleases(t *testing.T) {
	s := openStore(t)
	// Blockers take every node, so the Juice job waits for Resources (or Priority): eligible, and so reserved
	// ahead. Four of them: the host bed's partition is OverSubscribe=FORCE:4, under which --exclusive is ignored
	// and one blocker left room for the Juice job, which then ran at once and was ready for 45 ms, unseen by this
	// test. Where the partition does not oversubscribe, the first blocker holds the nodes and the others wait.
	blockers := make([]uint32, 4)
	for i := range blockers {
		blockers[i] = sbatch(t, "--exclusive", "--nodes="+strconv.Itoa(nodeCount()), "--ntasks-per-node=2", "-o", "/dev/null", "--wrap", "sleep 120")
		defer slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(blockers[i])))
	}
	waitFor(t, 30*time.Second, "the first blocker runs", func() bool { return getJob(t, blockers[0]).State == slurmrest.StateRunning })
	job := sbatch(t, "--exclusive", "--juice-pool=test", "--juice-gpu-count=2", "-o", "/dev/null", "--wrap", "true")
	j := getJob(t, job)
	require.Equal(t, slurmrest.StatePending, j.State)
	require.Equal(t, "juice:v1:pool=test,gpus=2", j.AdminComment)
	require.Equal(t, "juice:v1:pool=test,gpus=2", j.Comment, "the comment carries the request when the user gave none")
	waitFor(t, 30*time.Second, "reserved while pending", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReady })
	_, code := slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	require.Equal(t, 0, code)
	waitFor(t, 30*time.Second, "released after the cancel", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// A batch job whose pool is full waits in Slurm's queue for the pool's license (Reason=Licenses), is never
// requeued, and is served once the holder ends.
//
// With the legacy controller a whole-GPU request never fills a GPU (sessions stack on it), so both ask for most of
// its VRAM; and VRAM given back by a closed session is never added back there, so once the holder ended the pool's
// agent is restarted (what its operator does), and only then is the waiting job's session placed.
func TestPoolFullBatchJobWaitsForItsLicense(t *testing.T) {
	requireLicensed(t)
	s := openStore(t)
	ask := []string{"--juice-pool=small"}
	if legacyMode() {
		ask = append(ask, "--juice-vram=12")
	}
	waitFor(t, 60*time.Second, "pool small's license counts its one GPU", func() bool { return licenseTotal(t, "small") == 1 })
	holder := sbatch(t, append(ask, "-o", "/dev/null", "--wrap", "sleep 25")...)
	waitFor(t, 60*time.Second, "the holder has the pool's only GPU", func() bool { return getJob(t, holder).State == slurmrest.StateRunning })
	outFile := filepath.Join(world.dir, "poolfull.out")
	job := sbatch(t, append(ask, "-o", world.env.JobPath(outFile), "--wrap", "env")...)
	pendsFor(t, job, "Licenses", 60*time.Second)
	if legacyMode() {
		waitJobDone(t, holder, 2*time.Minute)
		noLiveSession(t, s, holder)
		legacyAgentsAdmin(t, "/agents/emu-small/restart")
	}
	j := waitJobDone(t, job, 4*time.Minute)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, 0, j.Run, "the job was requeued")
	b, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^JUICE_SESSION_ID=[0-9a-f-]{36}$`, string(b))
	noLiveSession(t, s, job)
	noLiveSession(t, s, holder)
}

func TestTimeLimitReleases(t *testing.T) {
	s := openStore(t)
	job := sbatch(t, "--time=1", "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 300")
	waitFor(t, 60*time.Second, "ready", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReady })
	j := waitJobDone(t, job, 3*time.Minute)
	require.Equal(t, slurmrest.StateTimeout, j.State)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

func TestRequeueGetsANewSession(t *testing.T) {
	s := openStore(t)
	job := sbatch(t, "--requeue", "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 20")
	waitFor(t, 60*time.Second, "run 0 runs", func() bool {
		return getJob(t, job).State == slurmrest.StateRunning && stateOf(t, s, run(job, 0)) == reconcile.StateReady
	})
	r0, _ := s.ForRun(context.Background(), run(job, 0))
	out, code := slurm(t, 10*time.Second, "scontrol", "requeue", strconv.Itoa(int(job)))
	require.Equal(t, 0, code, out)
	waitFor(t, 3*time.Minute, "run 1 ready and run 0 released", func() bool {
		return stateOf(t, s, run(job, 0)) == reconcile.StateReleased && stateOf(t, s, run(job, 1)) == reconcile.StateReady
	})
	r1, _ := s.ForRun(context.Background(), run(job, 1))
	require.NotEqual(t, r0.Status.SessionID, r1.Status.SessionID)
	_, _ = slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(job)))
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 1)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// The controller killed with -9 in the middle of a job, then started again: nothing is lost.
func TestControllerRestartMidJob(t *testing.T) {
	s := openStore(t)
	outFile := filepath.Join(world.dir, "restart.out")
	job := sbatch(t, "--juice-pool=test", "-o", world.env.JobPath(outFile), "--wrap", "env; sleep 10")
	waitFor(t, 60*time.Second, "running with its session", func() bool {
		return getJob(t, job).State == slurmrest.StateRunning && stateOf(t, s, run(job, 0)) == reconcile.StateReady
	})
	require.NoError(t, world.controller.Process.Signal(syscall.SIGKILL))
	_, _ = world.controller.Process.Wait()
	time.Sleep(2 * time.Second)
	require.NoError(t, startController())
	j := waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	noLiveSession(t, s, job)
}

// A session file tampered with, or another job's file put in its place, is refused on the compute node: the
// step fails with the plugin's message, and never runs without its GPUs.
func TestTamperedOrForeignSessionFileIsRefused(t *testing.T) {
	s := openStore(t)
	dir := world.env.Get("JUICE_TESTBED_SESSIONS_DIR")
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string, job uint32)
	}{
		{"tampered", func(t *testing.T, path string, _ uint32) {
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			b[len(b)-5] ^= 0x01
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}},
		{"another job's", func(t *testing.T, path string, job uint32) {
			// A valid file, sealed for another run: the one of the other job running beside it.
			other := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", "sleep 30")
			defer slurm(t, 10*time.Second, "scancel", strconv.Itoa(int(other)))
			otherFile := filepath.Join(dir, fmt.Sprintf("%d.0.session", other))
			waitFor(t, 60*time.Second, "the other job's session file", func() bool { _, err := os.Stat(otherFile); return err == nil })
			b, err := os.ReadFile(otherFile)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, b, 0o600))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outFile := filepath.Join(world.dir, "damaged.out")
			_ = os.Remove(outFile)
			// The batch script waits before its step, so the file can be damaged in between.
			job := sbatch(t, "--juice-pool=test", "-o", world.env.JobPath(outFile), "--wrap", "sleep 6; srun env")
			path := filepath.Join(dir, fmt.Sprintf("%d.0.session", job))
			waitFor(t, 60*time.Second, "the job runs", func() bool {
				_, err := os.Stat(path)
				return err == nil && getJob(t, job).State == slurmrest.StateRunning
			})
			tc.damage(t, path, job)
			j := waitJobDone(t, job, 90*time.Second)
			require.NotEqual(t, slurmrest.StateCompleted, j.State, "the step ran although its session file was bad")
			b, _ := os.ReadFile(outFile)
			require.Contains(t, string(b), "juice:", "the plugin says why")
			require.NotContains(t, string(b), "JUICE_SESSION_ID=", "no task ran with a session")
			waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
			out, _ := slurm(t, 10*time.Second, "sinfo", "-h", "-o", "%T")
			require.NotContains(t, out, "drain", "a bad session file must not drain the node")
		})
	}
}

// juice-slurm describe shows each transition of a run with its reason.
func TestDescribeShowsTransitions(t *testing.T) {
	s := openStore(t)
	job := sbatch(t, "--juice-pool=test", "-o", "/dev/null", "--wrap", "true")
	waitJobDone(t, job, 60*time.Second)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
	out, code := sh(t, 10*time.Second, filepath.Join(world.repo, "bin/juice-slurm"), "describe", "job", strconv.Itoa(int(job)),
		"--database-url", world.dbURL, "--cluster", world.env.Cluster())
	require.Equal(t, 0, code, out)
	for _, want := range []string{`pending\s+requesting\s+request\s+asking the Juice Controller for 1 GPU from pool test`,
		`requesting\s+waiting\s+queued\s+session \S+ queued`, `waiting\s+ready\s+active\s+session \S+ active on agent`,
		`ready\s+releasing\s+unwanted\s+job \d+ (run 0 finished|ended)`, `releasing\s+released\s+closed\s+session \S+ cancelled`} {
		require.Regexp(t, want, out)
	}
}
