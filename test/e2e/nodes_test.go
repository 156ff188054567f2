//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Several compute nodes sharing the state directory: every test bed has two (test/testbed.sh,
// test/chroot/slurm-chroot.sh), each slurmd in a UTS namespace of its own, so `hostname` in a task names its node.

// requireNodes returns the test bed's compute nodes, failing (never skipping) when it has fewer than two: the
// suite's multi-node cases would otherwise pass without testing anything.
func requireNodes(t *testing.T) []string {
	t.Helper()
	nodes := world.env.Nodes()
	if len(nodes) < 2 {
		t.Fatalf("the test bed has %d compute node(s) (JUICE_TESTBED_NODES=%q); it must have two: bring it up again "+
			"(test/testbed.sh up, or test/chroot/slurm-chroot.sh up SUITE)", len(nodes), world.env.Get("JUICE_TESTBED_NODES"))
	}
	return nodes
}

// taskLines parses the "TASK host session" lines the jobs below print.
func taskLines(out string) map[string]string {
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^TASK (\S+) (\S*)$`).FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	return got
}

const printTask = `echo "TASK $(hostname) $JUICE_SESSION_ID"`

// A Juice job runs on each node (srun -w), its task there sees its session, and plain jobs run there too.
func TestJobsRunOnEveryNode(t *testing.T) {
	s := openStore(t)
	for _, node := range requireNodes(t) {
		out, code := slurm(t, 90*time.Second, "srun", "-w", node, "--juice-pool=test", "sh", "-c", printTask+"; env")
		require.Equal(t, 0, code, "srun -w %s: %s", node, out)
		job := jobIDFrom(t, out)
		tasks := taskLines(out)
		require.Len(t, tasks, 1, out)
		require.Regexp(t, `^[0-9a-f-]{36}$`, tasks[node], "the task on %s sees its session:\n%s", node, out)
		waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
		noLiveSession(t, s, job)

		out, code = slurm(t, 60*time.Second, "srun", "-w", node, "sh", "-c", printTask)
		require.Equal(t, 0, code, "plain srun -w %s: %s", node, out)
		require.Equal(t, map[string]string{node: ""}, taskLines(out), "a plain job on %s has no session", node)
	}
}

// A job of several nodes with a Juice request has one reservation and one session, and the tasks on every node
// see that same session (the session file in the shared state directory is opened on each node). So srun -N2,
// and a batch job whose step spans both nodes, behave as users of a multi-node job expect.
func TestMultiNodeJobSharesOneSession(t *testing.T) {
	s := openStore(t)
	nodes := requireNodes(t)
	n := fmt.Sprint(len(nodes))

	check := func(t *testing.T, job uint32, out string) {
		t.Helper()
		tasks := taskLines(out)
		var hosts []string
		for h := range tasks {
			hosts = append(hosts, h)
		}
		sort.Strings(hosts)
		require.Equal(t, nodes, hosts, "one task on every node:\n%s", out)
		r, err := s.ForRun(context.Background(), run(job, 0))
		require.NoError(t, err)
		require.NotEmpty(t, r.Status.SessionID)
		for h, sid := range tasks {
			require.Equal(t, r.Status.SessionID, sid, "the task on %s sees the job's one session", h)
		}
		rs, err := s.ForJob(context.Background(), job)
		require.NoError(t, err)
		require.Len(t, rs, 1, "one reservation for the job")
		ours := 0
		for _, ss := range simSessions(t) {
			if ss.IdempotencyKey == r.ID.String() {
				ours++
			}
		}
		require.Equal(t, 1, ours, "one session at the Juice Controller for the whole job")
		waitFor(t, 30*time.Second, "released", func() bool { return stateOf(t, s, run(job, 0)) == reconcile.StateReleased })
		noLiveSession(t, s, job)
	}

	t.Run("srun", func(t *testing.T) {
		out, code := slurm(t, 90*time.Second, "srun", "-N", n, "--ntasks-per-node=1", "--juice-pool=test", "--juice-gpu-count=2",
			"sh", "-c", printTask+`; [ "$SLURM_PROCID" = 0 ] && echo "SLURM_JOB_ID=$SLURM_JOB_ID"; true`)
		require.Equal(t, 0, code, out)
		require.Len(t, regexp.MustCompile(`(?m)^TASK `).FindAllString(out, -1), len(nodes), "one task per node:\n%s", out)
		check(t, jobIDFrom(t, out), out)
	})
	t.Run("sbatch", func(t *testing.T) {
		outFile := filepath.Join(world.dir, "multinode.out")
		job := sbatch(t, "-N", n, "--ntasks-per-node=1", "--juice-pool=test", "-o", world.env.JobPath(outFile),
			"--wrap", "srun sh -c '"+strings.ReplaceAll(printTask, "'", `'\''`)+"'")
		j := waitJobDone(t, job, 90*time.Second)
		require.Equal(t, slurmrest.StateCompleted, j.State)
		b, err := os.ReadFile(outFile)
		require.NoError(t, err)
		check(t, job, string(b))
	})
}
