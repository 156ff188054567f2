package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The hook binary's start is the prolog's floor: it links the standard library and the hook's own packages, and
// nothing of the controller (pgx, prometheus, zap, protobuf, the session's crypto), whose inits and pages each
// run would pay for.
func TestHookLinksLittle(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	allowed := map[string]bool{
		"github.com/juice-slurm/juice-slurm/cmd/juice-slurm-hook":        true,
		"github.com/juice-slurm/juice-slurm/internal/hook":               true,
		"github.com/juice-slurm/juice-slurm/internal/settings":           true,
		"github.com/juice-slurm/juice-slurm/internal/secretfile":         true,
		"github.com/juice-slurm/juice-slurm/internal/backoff":            true,
		"github.com/juice-slurm/juice-slurm/controller/hookapi/hookwire": true,
		"github.com/juice-slurm/juice-slurm/reconcile/session/filename":  true,
	}
	for _, p := range strings.Fields(string(out)) {
		require.True(t, allowed[p], "cmd/juice-slurm-hook links %s: each package adds to every prolog's start", p)
	}
	// Nor the standard library's HTTP and TLS: their inits (81 packages with them, about 0.7 ms on a quiet
	// machine and several on a busy one) were more than the rest of the binary's start. An https: hook-url is
	// handed to juice-slurm. Nor net (the socket is plain system calls) or os/signal (no handler): each was about
	// an eighth and a quarter of an empty Go program's start here.
	out, err = exec.Command(goTool(t), "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, p := range strings.Fields(string(out)) {
		require.NotContains(t, []string{"net/http", "crypto/tls", "crypto/x509", "compress/flate", "net", "os/signal"}, p, "cmd/juice-slurm-hook links %s", p)
	}
}

// The exit statuses slurmctld and an administrator see: usage 2; a job that asked nothing of Juice passes without
// a call, whatever the settings say. A Juice job whose hook-url is https: (the default) is handed to juice-slurm
// beside the binary, which fails it without the pinned certificate; without juice-slurm there, it fails saying so.
func TestExitStatuses(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "juice-slurm-hook")
	out, err := exec.Command(goTool(t), "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	status := func(env []string, args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"JUICE_CONFIG="}, env...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		require.NoError(t, err)
		return 0, string(out)
	}
	code, out2 := status(nil)
	require.Equal(t, 2, code, out2)
	code, _ = status(nil, "postlog")
	require.Equal(t, 2, code)
	code, out2 = status([]string{"SLURM_JOB_ID=7", "SLURM_CLUSTER_NAME=c1"}, "prolog", "--no-such-flag")
	require.Equal(t, 0, code, "a plain job's prolog passes a bad flag: %s", out2)
	code, out2 = status([]string{"SLURM_JOB_ID=7", "SLURM_CLUSTER_NAME=c1", "SPANK_JUICE_REQUEST=juice:v1:pool=p,gpus=1"}, "prolog", "--no-such-flag")
	require.Equal(t, 2, code, "a Juice job's prolog fails on a bad flag: %s", out2)
	code, out2 = status([]string{"SLURM_JOB_ID=7", "SLURM_CLUSTER_NAME=c1", "SPANK_JUICE_REQUEST=juice:v1:pool=p,gpus=1"}, "prolog",
		"--hook-ca", filepath.Join(t.TempDir(), "absent.crt"))
	require.Equal(t, 1, code, "no juice-slurm beside it: %s", out2)
	require.Contains(t, out2, "cannot run "+filepath.Join(dir, "juice-slurm"))
	build := exec.Command(goTool(t), "build", "-o", filepath.Join(dir, "juice-slurm"), "../juice-slurm")
	out, err = build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	code, out2 = status([]string{"SLURM_JOB_ID=7", "SLURM_CLUSTER_NAME=c1", "SPANK_JUICE_REQUEST=juice:v1:pool=p,gpus=1"}, "prolog",
		"--hook-ca", filepath.Join(t.TempDir(), "absent.crt"))
	require.Equal(t, 1, code, "no CA, no call: %s", out2)
	require.Contains(t, out2, "hook CA", "juice-slurm hook ran, and found no certificate")
	code, out2 = status([]string{"SLURM_JOB_ID=7", "SLURM_CLUSTER_NAME=c1", "SPANK_JUICE_REQUEST=juice:v1:pool=p,gpus=1"}, "epilog",
		"--hook-ca", filepath.Join(t.TempDir(), "absent.crt"))
	require.Equal(t, 0, code, "the epilog never fails: %s", out2)
}

// goTool is the go command (go test puts its own first in PATH).
func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to build the hook")
	return p
}
