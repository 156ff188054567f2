package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// Issue 26, finding 8: the command line as the man page tells it.

// `describe job 40_7` names an array's element as status prints it.
func TestJobArgNamesArrayElements(t *testing.T) {
	job, task, err := parseJobArg("40_7")
	require.NoError(t, err)
	require.Equal(t, uint32(40), job)
	require.Equal(t, int64(7), task)
	job, task, err = parseJobArg("41")
	require.NoError(t, err)
	require.Equal(t, uint32(41), job)
	require.Equal(t, int64(-1), task)
	for _, bad := range []string{"x1", "40_", "_7", "40_7_1", "0", "-3"} {
		_, _, err := parseJobArg(bad)
		require.Error(t, err, bad)
	}
	// Past the job id, on to the settings: the element is not refused as a job id.
	err = run(context.Background(), []string{"describe", "job", "40_7", "--config="})
	require.ErrorContains(t, err, "--database-url and --cluster are required")
}

// --help is help, everywhere, and exits 0.
func TestHelpIsNoError(t *testing.T) {
	for _, args := range [][]string{{"describe", "job", "--help"}, {"describe", "--help"}, {"release", "job", "-h"},
		{"key", "--help"}, {"key", "show", "--help"}, {"jobs", "--help"}, {"version", "--help"}} {
		require.ErrorIs(t, run(context.Background(), args), flag.ErrHelp, "%v", args)
	}
}

// Bad usage exits 2, and is told before anything is dialled; errors name their command once, and the settings
// file read, not the default one.
func TestBadUsageExitsTwo(t *testing.T) {
	unreachable := []string{"--database-url", "postgres://nobody@127.0.0.1:1/x", "--cluster", "c"}
	for _, args := range [][]string{
		{"migrate", "--config="},
		{"controller", "--config=", "--log-level", "loud"},
		{"controller", "--config=", "--log-format", "xml"},
		append([]string{"report", "--config=", "--since", "yesterday", "--by", "user"}, unreachable...),
		append([]string{"report", "--config=", "--since", "1d", "--until", "2d", "--by", "user"}, unreachable...),
		{"key", "retire", "--config=", "--json"},
		{"describe", "job", "x1"},
	} {
		err := run(context.Background(), args)
		require.Error(t, err, "%v", args)
		require.Equal(t, exitUsage, exitStatusOf(err), "%v: %v", args, err)
		require.NotContains(t, err.Error(), "database:", "%v: told after dialling", args)
		require.NotContains(t, err.Error(), "juice-slurm", "%v: main prefixes the program's name once", args)
	}
	conf := filepath.Join(t.TempDir(), "other.conf")
	require.NoError(t, os.WriteFile(conf, nil, 0o600))
	err := run(context.Background(), []string{"status", "--config", conf})
	require.ErrorContains(t, err, "status: --database-url and --cluster are required (settings file: "+conf)
	require.NotContains(t, err.Error(), DefaultConfig)
}

// version and key show speak JSON.
func TestVersionAndKeyShowSpeakJSON(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, runVersion(context.Background(), &out, []string{"--config=", "--json"}))
	var v map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &v))
	require.Equal(t, map[string]any{"version": Version, "go": runtime.Version(), "schema": float64(store.KnownSchema())}, v)
	key := filepath.Join(t.TempDir(), "cluster.key")
	require.NoError(t, os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600))
	out.Reset()
	require.NoError(t, runKey(context.Background(), &out, []string{"show", "--config=", "--cluster-key", key, "--json"}))
	require.Regexp(t, `^\{\s*"current": \{\s*"id": "[0-9a-f]{16}",\s*"file": "`+key+`"\s*\},\s*"previous": null\s*\}\s*$`, out.String())
}

// jobs' squeue-style filters: -p partitions, -t states (Slurm's, short or long, or Juice's), any case.
func TestJobsFilters(t *testing.T) {
	runs := []hookapi.RunView{{JobID: 1, Partition: "gpu", State: "waiting", JobState: "PENDING"},
		{JobID: 2, Partition: "cpu", State: "ready", JobState: "RUNNING"},
		{JobID: 3, Partition: "gpu", State: "failed", JobState: "PENDING"}}
	kept := func(o *jobsOpts) (ids []uint32) {
		for _, r := range runs {
			if o.keep(r) {
				ids = append(ids, r.JobID)
			}
		}
		return ids
	}
	require.Equal(t, []uint32{1, 2, 3}, kept(&jobsOpts{}))
	require.Equal(t, []uint32{1, 3}, kept(&jobsOpts{partition: "gpu"}))
	require.Equal(t, []uint32{1, 3}, kept(&jobsOpts{states: "PD"}))
	require.Equal(t, []uint32{2}, kept(&jobsOpts{states: "running"}))
	require.Equal(t, []uint32{1, 2}, kept(&jobsOpts{states: "waiting,R"}))
	require.Equal(t, []uint32{3}, kept(&jobsOpts{partition: "gpu", states: "FAILED"}))
}

// An ordinary user may not read the settings file (root:slurm 0640): jobs and version pass it over, where they
// failed with "permission denied"; the admin commands still fail on it. Root reads every file, so the test runs
// itself again as nobody.
func TestUsersPassOverAnUnreadableSettingsFile(t *testing.T) {
	if conf := os.Getenv("JUICE_TEST_UNREADABLE_CONF"); conf != "" {
		defaultConfig = conf
		var out bytes.Buffer
		require.NoError(t, runVersion(context.Background(), &out, nil), "version")
		err := runJobs(context.Background(), &out, []string{"--hook-ca", "/nonexistent/hook.crt"})
		require.ErrorContains(t, err, "you may not read "+conf)
		require.ErrorContains(t, err, "JUICE_HOOK_URL")
		out.Reset()
		require.NoError(t, runSettings(&out, []string{"jobs"}), "settings jobs: what jobs runs with")
		require.Regexp(t, `(?m)^config +`+regexp.QuoteMeta(conf)+` +default \(not readable by you: passed over\)$`, out.String())
		require.Regexp(t, `(?m)^hook-url +https://127.0.0.1:7171 +default$`, out.String())
		err = run(context.Background(), []string{"status"})
		require.ErrorIs(t, err, os.ErrPermission, "status reads the database URL from the file, which it must read")
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("runs as root, to run itself as nobody")
	}
	dir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.Mkdir(dir, 0o755))
	// t.TempDir makes two levels of directories, each 0700.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o755))
	bin := filepath.Join(dir, "cmd.test")
	b, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, b, 0o755))
	conf := filepath.Join(dir, "juice-slurm.conf")
	require.NoError(t, os.WriteFile(conf, []byte("hook-url = https://ctl:7171\ndatabase-url = postgres://x:secret@db/x\n"), 0o640))
	cmd := exec.Command(bin, "-test.run=^TestUsersPassOverAnUnreadableSettingsFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), "JUICE_TEST_UNREADABLE_CONF="+conf)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "as nobody:\n%s", out)
	require.Contains(t, string(out), "PASS")
}
