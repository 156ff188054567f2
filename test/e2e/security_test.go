//go:build e2e

package e2e

// The security suite (make test-security): issue 15's findings replayed on the real test bed as an ordinary user
// (nobody) would, with a libslurm submitter built here (submitter/submit.c) that sets any spank_job_env. Each
// case names the defence it proves and was run once with that defence removed (docs/security.md says which).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

const nobody = "65534"

var (
	submitterOnce sync.Once
	submitterBin  string
	submitterErr  error
)

// hostBed is where the security suite runs: the host test bed (make test-security). On a chroot test bed
// (test/releases.sh runs every e2e test there) the host's libslurm cannot talk to that release's slurmctld, and
// the files it checks live elsewhere: the suite says so and skips.
func hostBed(t *testing.T) {
	t.Helper()
	if os.Getenv("JUICE_E2E_SECURITY") != "1" {
		t.Skip("the security suite runs in make test-security (JUICE_E2E_SECURITY=1), once, on the host test bed")
	}
	if kind := world.env.Get("JUICE_TESTBED_KIND"); kind != "" {
		t.Skipf("the security suite runs on the host test bed (make test-security), not on %s", kind)
	}
}

// submitter builds the libslurm submitter once (libslurm-dev is on the test bed).
func submitter(t *testing.T) string {
	t.Helper()
	hostBed(t)
	submitterOnce.Do(func() {
		dir, err := os.MkdirTemp("", "juice-security-bin-")
		if err != nil {
			submitterErr = err
			return
		}
		_ = os.Chmod(dir, 0o755)
		submitterBin = filepath.Join(dir, "juice-security-submit")
		out, err := exec.Command("gcc", "-Wall", "-Wextra", "-Werror", "-o", submitterBin,
			filepath.Join(world.repo, "test/e2e/submitter/submit.c"), "-lslurm").CombinedOutput()
		if err != nil {
			submitterErr = fmt.Errorf("build the libslurm submitter: %v: %s", err, out)
		}
	})
	require.NoError(t, submitterErr)
	return submitterBin
}

// asNobody runs a command as the user nobody, with no SLURM_JWT.
func asNobody(t *testing.T, within time.Duration, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=" + nobody, "--regid=" + nobody, "--clear-groups", name}, args...)...)
	cmd.Env = testbed.CleanEnv()
	cmd.Dir = "/tmp"
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err, "%s %v", name, args)
	return string(out), 0
}

// outDir is a directory nobody's jobs may write their output into.
func outDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "juice-security-out-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(d, 0o777))
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// submitAsNobody submits a job with the given spank_job_env; it returns the job id, or 0 and the refusal.
func submitAsNobody(t *testing.T, out string, spankEnv ...string) (uint32, string) {
	t.Helper()
	text, code := asNobody(t, 30*time.Second, submitter(t), append([]string{out, world.env.Partition()}, spankEnv...)...)
	// A refusal must be slurmctld's answer, not a controller that could not be reached.
	require.NotContains(t, text, "Unable to contact", "slurmctld did not answer the submission")
	if code != 0 {
		return 0, text
	}
	id, err := strconv.ParseUint(strings.TrimSpace(text), 10, 32)
	require.NoError(t, err, text)
	return uint32(id), ""
}

// F1: the request travels only through admin_comment. A job whose spank_job_env holds SPANK_JUICE_REQUEST (which
// reaches the prolog unchanged) and no request job_submit.lua saw gets no GPUs and no reservation; a job whose
// admin_comment asks for one GPU gets one, whatever its SPANK_JUICE_REQUEST says.
func TestSecurityF1RequestOnlyFromAdminComment(t *testing.T) {
	hostBed(t)
	s := openStore(t)
	dir := outDir(t)
	forged := filepath.Join(dir, "forged.out")
	job, refusal := submitAsNobody(t, forged, "SPANK_JUICE_REQUEST=juice:v1:pool=test,gpus=8")
	require.Zero(t, refusal)
	j := waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Empty(t, j.AdminComment)
	b, err := os.ReadFile(forged)
	require.NoError(t, err)
	require.NotContains(t, string(b), "JUICE_SESSION_ID", "a forged SPANK_JUICE_REQUEST got a session")
	rs, err := s.ForJob(context.Background(), job)
	require.NoError(t, err)
	require.Empty(t, rs, "a forged SPANK_JUICE_REQUEST made a reservation")

	both := filepath.Join(dir, "both.out")
	// SLURM_SPANK_JUICE_POOL in the job's environment (as sbatch --juice-pool leaves it) makes the plugin on the
	// compute node open the session.
	job, refusal = submitAsNobody(t, both, "JUICE_REQUEST=juice:v1:pool=test,gpus=1", "env:SLURM_SPANK_JUICE_POOL=test",
		"SPANK_JUICE_REQUEST=juice:v1:pool=test,gpus=8")
	require.Zero(t, refusal)
	j = waitJobDone(t, job, 90*time.Second)
	require.Equal(t, slurmrest.StateCompleted, j.State)
	require.Equal(t, "juice:v1:pool=test,gpus=1", j.AdminComment)
	b, err = os.ReadFile(both)
	require.NoError(t, err)
	require.Contains(t, string(b), "JUICE_GPU_COUNT=1\n", "the job got what its admin_comment asks, not its SPANK_JUICE_REQUEST")
	rs, err = s.ForJob(context.Background(), job)
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.Equal(t, 1, rs[0].Request.GPUs)
	waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
}

// F2: the site's limits (juice-policy.conf: max_gpus 8, pools demo, small, test on the test bed) refuse a job at
// submission, whatever the submitter put in spank_job_env; nothing is queued.
func TestSecurityF2LimitsAtSubmission(t *testing.T) {
	hostBed(t)
	dir := outDir(t)
	// The same submitter's request within the limits is queued: the refusals below are the limits'.
	job, refusal := submitAsNobody(t, filepath.Join(dir, "within.out"), "JUICE_REQUEST=juice:v1:pool=test,gpus=1")
	require.NotZero(t, job, "a request within the limits was refused: %s", refusal)
	waitJobDone(t, job, 90*time.Second)
	for _, req := range []string{"juice:v1:pool=test,gpus=9999", "juice:v1:pool=test,gpus=9",
		"juice:v1:pool=elsewhere,gpus=1", "juice:v1:pool=test,gpus=1,vram=99999999999999999999"} {
		job, refusal := submitAsNobody(t, filepath.Join(dir, "over.out"), "JUICE_REQUEST="+req)
		require.Zero(t, job, "%s was queued as job %d", req, job)
		require.Contains(t, refusal, "refused", req)
	}
}

// F11: a newline in the request never forges a line of slurmctld's log (the refusal logs it escaped).
func TestSecurityF11NoForgedLogLines(t *testing.T) {
	hostBed(t)
	forgedLine := "juice: job_submit: uid 0 request juice:v1:pool=test,gpus=8 FORGED-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	job, refusal := submitAsNobody(t, filepath.Join(outDir(t), "nl.out"), "JUICE_REQUEST=juice:v1:pool=test,gpus=1\n"+forgedLine)
	require.Zero(t, job)
	require.Contains(t, refusal, "refused")
	logFile := filepath.Join(world.env.Get("JUICE_TESTBED_DIR"), "log", "slurm", "slurmctld.log")
	var text string
	waitFor(t, 10*time.Second, "slurmctld logs the refusal", func() bool {
		b, err := os.ReadFile(logFile)
		require.NoError(t, err)
		text = string(b)
		return strings.Contains(text, strings.TrimPrefix(forgedLine, "juice: job_submit: uid 0 "))
	})
	for _, line := range strings.Split(text, "\n") {
		require.False(t, strings.HasPrefix(line, forgedLine), "a forged line in slurmctld's log: %q", line)
		if strings.Contains(line, forgedLine) {
			require.Regexp(t, regexp.MustCompile(`\\010`), line, "the newline is escaped")
		}
	}
}

// F9: no local user reaches PostgreSQL without a password: not as the superuser, not as the owner or runtime
// role, over TCP or the socket.
func TestSecurityF9NoPasswordlessDatabase(t *testing.T) {
	hostBed(t)
	sock := filepath.Join(world.env.Get("JUICE_TESTBED_DIR"), "pg", "sock")
	for _, role := range []string{"postgres", "juice_owner", "juice_runtime", "juice"} {
		for _, host := range []string{"127.0.0.1", sock} {
			out, code := asNobody(t, 20*time.Second, "/usr/bin/psql", "-w", "-h", host, "-p", "5433", "-U", role, "-d", "postgres", "-c", "SELECT 1")
			require.NotEqual(t, 0, code, "nobody connected as %s through %s: %s", role, host, out)
		}
	}
}

// F10: the hook log (every user's job ids and session ids) and the session files are not world-readable.
func TestSecurityF10PrivateFiles(t *testing.T) {
	hostBed(t)
	logFile := filepath.Join(world.env.Get("JUICE_TESTBED_DIR"), "log", "juice-hooks.log")
	for _, p := range []string{logFile, "/etc/juice-slurm/hook.key", "/etc/juice-slurm/hook.secret", "/etc/juice-slurm/cluster.key",
		world.env.Get("JUICE_TESTBED_DIR") + "/pgpass"} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Zero(t, st.Mode().Perm()&0o077, "%s is mode %04o", p, st.Mode().Perm())
	}
	st, err := os.Stat(world.env.Get("JUICE_TESTBED_SESSIONS_DIR"))
	require.NoError(t, err)
	require.Zero(t, st.Mode().Perm()&0o077, "the session directory is mode %04o", st.Mode().Perm())
	out, code := asNobody(t, 10*time.Second, "cat", logFile)
	require.NotEqual(t, 0, code, "nobody read the hook log: %s", out)
}

// F8: a session file an earlier job with the same id left behind (its epilog never ran; here sealed by hand under
// the cluster key, for the next job id, run 0 and a higher run) is never handed to a new job with that id: the
// plugin cannot know the reservation, so the file must be gone before the job starts. nobody's job makes the
// plugin want a session (SLURM_SPANK_JUICE_POOL) without asking anything of Juice: it gets no session, and says
// why.
func TestSecurityF8LeftoverSessionFileIsNeverHandedOn(t *testing.T) {
	hostBed(t)
	dir := world.env.Get("JUICE_TESTBED_SESSIONS_DIR")
	st, err := os.Stat(dir)
	require.NoError(t, err)
	owner := st.Sys().(*syscall.Stat_t)
	key, err := session.KeyFile(world.env.ClusterKey()).Bytes()
	require.NoError(t, err)
	probe := sbatch(t, "-o", "/dev/null", "--wrap", "true")
	next := probe + 1 // nothing else submits while the suite holds the test bed
	var planted []string
	for _, r := range []int{0, 3} {
		b := session.Binding{Cluster: world.env.Cluster(), JobID: next, Run: r, Reservation: uuid.New()}
		data, err := session.Seal(key, b, []session.EnvVar{{Name: "JUICE_SESSION_ID", Value: "leftover-of-an-earlier-job"},
			{Name: "JUICE_POOL", Value: "test"}, {Name: "JUICE_REQUEST", Value: "juice:v1:pool=test,gpus=1"}})
		require.NoError(t, err)
		p := filepath.Join(dir, session.FileName(b))
		require.NoError(t, os.WriteFile(p, data, 0o600))
		require.NoError(t, os.Chown(p, int(owner.Uid), int(owner.Gid)), "as a prolog would have written it")
		planted = append(planted, p)
	}
	t.Cleanup(func() {
		for _, p := range planted {
			_ = os.Remove(p)
		}
	})
	out := filepath.Join(outDir(t), "f8.out")
	job, refusal := submitAsNobody(t, out, "env:SLURM_SPANK_JUICE_POOL=test")
	require.Zero(t, refusal)
	require.Equal(t, next, job, "the job took the id the leftover files are for")
	j := waitJobDone(t, job, 90*time.Second)
	b, _ := os.ReadFile(out)
	require.NotContains(t, string(b), "leftover-of-an-earlier-job", "a leftover session file was handed to a new job with its id")
	require.NotEqual(t, slurmrest.StateCompleted, j.State, "the task ran without the session its plugin wanted")
	for _, p := range planted {
		_, err := os.Stat(p)
		require.True(t, os.IsNotExist(err), "%s is gone", p)
	}
	nodes, _ := slurm(t, 10*time.Second, "sinfo", "-h", "-o", "%T")
	require.NotContains(t, nodes, "drain", "a task refused its missing session must not drain the node")
}
