// Package site tests how juice-slurm fits into a site's own Slurm setup without any service: the slurmctld hook
// scripts when their config or binary is missing, and the dispatcher that runs a site's PrologSlurmctld and
// EpilogSlurmctld beside ours (hooks/slurmctld-parts.sh). The same is tested on the real slurmctld in test/e2e
// (TestSite*, TestPlainJobs*).
package site

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func hooksDir(t *testing.T) string {
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Join(filepath.Dir(file), "..", "..", "hooks")
}

// runScript runs a hook script as slurmctld would: no PATH, only the given environment.
func runScript(t *testing.T, script string, env ...string) (string, int) {
	t.Helper()
	c := exec.Command("/bin/sh", script)
	c.Env = env
	c.Dir = t.TempDir()
	out, err := c.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}

func writeFile(t *testing.T, path, text string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), mode))
}

// A missing or broken config, or a missing binary, fails only Juice jobs' prologs; the epilog always passes.
func TestHooksPassPlainJobsWhenMisconfigured(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.sh")
	writeFile(t, broken, "JUICE_SLURM_BIN=/x\nif then fi\n", 0o644)
	noBin := filepath.Join(dir, "nobin.sh")
	writeFile(t, noBin, "JUICE_SLURM_BIN="+filepath.Join(dir, "missing-juice-slurm")+"\n", 0o644)
	for name, config := range map[string]string{"missing config": filepath.Join(dir, "absent.sh"),
		"broken config": broken, "missing binary": noBin} {
		t.Run(name, func(t *testing.T) {
			base := []string{"JUICE_CONFIG_SH=" + config, "SLURM_JOB_ID=42", "SLURM_CLUSTER_NAME=c"}
			out, code := runScript(t, filepath.Join(hooksDir(t), "juice-prolog.sh"), base...)
			require.Equal(t, 0, code, "a plain job's prolog failed: %s", out)
			require.Empty(t, out)
			out, code = runScript(t, filepath.Join(hooksDir(t), "juice-prolog.sh"),
				append(base, "SPANK_JUICE_REQUEST=juice:v1:pool=test,gpus=1")...)
			require.Equal(t, 1, code, "a Juice job's prolog passed without juice-slurm: %s", out)
			require.Contains(t, out, "juice: job 42: ")
			for _, env := range [][]string{base, append(base, "SPANK_JUICE_REQUEST=juice:v1:pool=test,gpus=1")} {
				out, code = runScript(t, filepath.Join(hooksDir(t), "juice-epilog.sh"), env...)
				require.Equal(t, 0, code, "the epilog failed: %s", out)
			}
		})
	}
}

// The hooks exec the hook binary named in the config (JUICE_HOOK_BIN) with "prolog|epilog"; a config older than
// it (JUICE_SLURM_BIN only) gets the juice-slurm-hook beside juice-slurm, or juice-slurm's "hook prolog|epilog"
// when there is none. Each passes on the binary's status.
func TestHooksRunTheConfiguredBinary(t *testing.T) {
	fake := func(path string) {
		writeFile(t, path, "#!/bin/sh\necho \"$0 called $*\"\nexit 3\n", 0o755)
	}
	dir := t.TempDir()
	slurm, hook := filepath.Join(dir, "lib", "juice-slurm"), filepath.Join(dir, "hookdir", "juice-slurm-hook")
	fake(slurm)
	fake(hook)
	for _, tc := range []struct {
		name, config, want string
	}{
		{"JUICE_HOOK_BIN", "JUICE_HOOK_BIN=" + hook + "\nJUICE_SLURM_BIN=" + slurm + "\n", hook + " called "},
		{"JUICE_HOOK_BIN not executable", "JUICE_HOOK_BIN=" + hook + ".missing\nJUICE_SLURM_BIN=" + slurm + "\n", slurm + " called hook "},
		{"JUICE_SLURM_BIN only, no hook binary beside it", "JUICE_SLURM_BIN=" + slurm + "\n", slurm + " called hook "},
		{"JUICE_SLURM_BIN only, the hook binary beside it", "JUICE_SLURM_BIN=" + filepath.Join(dir, "hookdir", "juice-slurm") + "\n", hook + " called "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			config := filepath.Join(t.TempDir(), "juice-config.sh")
			writeFile(t, config, tc.config, 0o644)
			for _, which := range []string{"prolog", "epilog"} {
				out, code := runScript(t, filepath.Join(hooksDir(t), "juice-"+which+".sh"), "JUICE_CONFIG_SH="+config)
				require.Equal(t, 3, code)
				require.Equal(t, tc.want+which+"\n", out)
			}
		})
	}
}

// The dispatcher runs the parts in name order; a prolog stops at the first failure with its status, an epilog
// runs every part and exits with the first failure's status; backups and non-executables are skipped.
func TestSlurmctldPartsOrderAndFailures(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace")
	part := func(ctx, name string, code int) {
		writeFile(t, filepath.Join(dir, ctx+".d", name),
			"#!/bin/sh\necho \""+name+" $SLURM_JOB_ID\" >>"+trace+"\nexit "+string(rune('0'+code))+"\n", 0o755)
	}
	for _, ctx := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
		part(ctx, "10-site", 0)
		part(ctx, "20-fails", 4)
		part(ctx, "50-juice", 0)
		part(ctx, "60-also-fails", 5)
		part(ctx, "30-backup~", 0)
		part(ctx, "40-old.dpkg-old", 0)
		writeFile(t, filepath.Join(dir, ctx+".d", "45-not-executable"), "#!/bin/sh\nexit 9\n", 0o644)
	}
	script := filepath.Join(hooksDir(t), "slurmctld-parts.sh")
	readTrace := func() string {
		b, _ := os.ReadFile(trace)
		_ = os.Remove(trace)
		return string(b)
	}
	env := []string{"SLURMCTLD_PARTS_DIR=" + dir, "SLURM_JOB_ID=7"}
	out, code := runScript(t, script, append(env, "SLURM_SCRIPT_CONTEXT=prolog_slurmctld")...)
	require.Equal(t, 4, code, out)
	require.Equal(t, "10-site 7\n20-fails 7\n", readTrace())
	require.Contains(t, out, "part 20-fails exited 4")
	out, code = runScript(t, script, append(env, "SLURM_SCRIPT_CONTEXT=epilog_slurmctld")...)
	require.Equal(t, 4, code, out)
	require.Equal(t, "10-site 7\n20-fails 7\n50-juice 7\n60-also-fails 7\n", readTrace())

	// All pass: 0; no parts at all: 0; an unknown context: refused.
	for _, ctx := range []string{"prolog_slurmctld", "epilog_slurmctld"} {
		require.NoError(t, os.Remove(filepath.Join(dir, ctx+".d", "20-fails")))
		require.NoError(t, os.Remove(filepath.Join(dir, ctx+".d", "60-also-fails")))
	}
	out, code = runScript(t, script, append(env, "SLURM_SCRIPT_CONTEXT=prolog_slurmctld")...)
	require.Equal(t, 0, code, out)
	require.Equal(t, "10-site 7\n50-juice 7\n", readTrace())
	out, code = runScript(t, script, "SLURMCTLD_PARTS_DIR="+filepath.Join(dir, "none"), "SLURM_SCRIPT_CONTEXT=prolog_slurmctld")
	require.Equal(t, 0, code, out)
	out, code = runScript(t, script, append(env, "SLURM_SCRIPT_CONTEXT=prolog")...)
	require.Equal(t, 1, code, out)
	require.True(t, strings.Contains(out, "neither"), out)
}
