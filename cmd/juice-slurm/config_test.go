package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/internal/settings"
)

// One precedence for every command: a flag on the command line, then JUICE_<FLAG> in the environment, then the
// --config file, then the flag's default.
func TestFlagEnvConfigPrecedence(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "juice.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`# a comment
cluster = from-file
poll-interval = 7s
workers = "3"

trust-comment = true
`), 0o644))
	newFS := func() (*flag.FlagSet, *string, *time.Duration, *int, *bool) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		return fs, fs.String("cluster", "default", ""), fs.Duration("poll-interval", time.Second, ""), fs.Int("workers", 4, ""),
			fs.Bool("trust-comment", false, "")
	}

	fs, cluster, poll, workers, trust := newFS()
	require.NoError(t, parseFlags(fs, []string{"--config", conf}))
	require.Equal(t, "from-file", *cluster)
	require.Equal(t, 7*time.Second, *poll)
	require.Equal(t, 3, *workers)
	require.True(t, *trust)

	t.Setenv("JUICE_CLUSTER", "from-env")
	t.Setenv("JUICE_POLL_INTERVAL", "9s")
	fs, cluster, poll, workers, _ = newFS()
	require.NoError(t, parseFlags(fs, []string{"--config", conf, "--cluster", "from-flag"}))
	require.Equal(t, "from-flag", *cluster, "the command line wins")
	require.Equal(t, 9*time.Second, *poll, "the environment wins over the file")
	require.Equal(t, 3, *workers, "the file wins over the default")

	t.Setenv("JUICE_CONFIG", conf)
	fs, cluster, _, _, _ = newFS()
	require.NoError(t, parseFlags(fs, nil))
	require.Equal(t, "from-env", *cluster, "JUICE_CONFIG names the file")
}

func TestConfigErrorsNameTheBadValue(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.conf")
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
		return p
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("poll-interval", time.Second, "")
	err := parseFlags(fs, []string{"--config", write("poll-interval = soon\n")})
	require.ErrorContains(t, err, `invalid value "soon" for poll-interval`)

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("poll-interval", time.Second, "")
	err = parseFlags(fs, []string{"--config", write("poll-intervall = 2s\n")})
	require.ErrorContains(t, err, `c.conf:1: unknown setting "poll-intervall"`)

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("poll-interval", time.Second, "")
	err = parseFlags(fs, []string{"--config", write("\n\npoll-interval 2s\n")})
	require.ErrorContains(t, err, `c.conf:3: want 'setting = value'`)

	t.Setenv("JUICE_POLL_INTERVAL", "never")
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("poll-interval", time.Second, "")
	err = parseFlags(fs, nil)
	require.ErrorContains(t, err, `environment variable JUICE_POLL_INTERVAL: invalid value "never"`)

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	require.ErrorContains(t, parseFlags(fs, []string{"stray"}), `unexpected argument "stray"`)
	require.Error(t, parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--config", filepath.Join(dir, "missing")}))
}

// One file serves every command: the controller's settings do not trouble describe, and each command takes its
// own (issue 13: `describe --config controller.conf` failed with unknown setting "slurmrestd-url").
func TestOneFileServesEveryCommand(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "juice-slurm.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`cluster = c9
database-url = postgres://juice:s3cret@db1:5432,db2:5432/juice?target_session_attrs=read-write
slurmrestd-url = http://10.0.0.1:6820
hook-listen = 0.0.0.0:7171
hook-url = http://ctl:7171
prolog-wait = 90s
`), 0o640))
	for cmd, register := range settingCommands {
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		register(fs)
		require.NoError(t, parseFlags(fs, []string{"--config", conf}), cmd)
	}
	fs := flag.NewFlagSet("describe", flag.ContinueOnError)
	o := jobFlags(fs)
	require.NoError(t, parseFlags(fs, []string{"--config", conf}))
	require.Equal(t, "c9", *o.cluster)
	var out bytes.Buffer
	require.NoError(t, runSettings(&out, []string{"hook", "--config", conf}))
	require.Regexp(t, `(?m)^hook-url +http://ctl:7171 +`+regexp.QuoteMeta(conf)+`:5$`, out.String())
	require.Regexp(t, `(?m)^prolog-wait +1m30s +`, out.String())
}

// The hook binary reads the shared file knowing its names from settings.Names, not from the commands' flags (it
// does not link them): the list must be every setting the file may hold, and nothing else.
func TestSettingNamesAreTheCommandsFlags(t *testing.T) {
	want := map[string]bool{}
	for name, ok := range knownSettings() {
		if ok {
			want[name] = true
		}
	}
	require.Equal(t, want, settings.Names)
}

// The default file is read when it exists; a missing default file is no error, a missing named one is.
func TestDefaultConfigFile(t *testing.T) {
	dir := t.TempDir()
	was := defaultConfig
	defaultConfig = filepath.Join(dir, "juice-slurm.conf")
	t.Cleanup(func() { defaultConfig = was })
	newFS := func() (*flag.FlagSet, *storeOpts) {
		fs := flag.NewFlagSet("status", flag.ContinueOnError)
		return fs, storeFlags(fs)
	}
	fs, o := newFS()
	require.NoError(t, parseFlags(fs, nil), "no default file: flags and environment say it all")
	require.Empty(t, *o.cluster)

	require.NoError(t, os.WriteFile(defaultConfig, []byte("cluster = from-default-file\n"), 0o640))
	fs, o = newFS()
	require.NoError(t, parseFlags(fs, nil))
	require.Equal(t, "from-default-file", *o.cluster)

	fs, o = newFS()
	require.NoError(t, parseFlags(fs, []string{"--config="}), "--config= reads no file")
	require.Empty(t, *o.cluster)

	fs, _ = newFS()
	err := parseFlags(fs, []string{"--config", filepath.Join(dir, "missing.conf")})
	require.ErrorIs(t, err, os.ErrNotExist, "a file named on the command line must exist")
	t.Setenv("JUICE_CONFIG", filepath.Join(dir, "missing.conf"))
	fs, _ = newFS()
	require.ErrorIs(t, parseFlags(fs, nil), os.ErrNotExist, "so must one named by JUICE_CONFIG")
}

// `juice-slurm settings` names each value's source, and hides the database password.
func TestSettingsNameTheirSource(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "juice-slurm.conf")
	require.NoError(t, os.WriteFile(conf, []byte("cluster = c9\n\ndatabase-url = postgres://juice:s3cret@db1/juice\nworkers = 8\n"), 0o640))
	t.Setenv("JUICE_WORKERS", "6")
	var out bytes.Buffer
	require.NoError(t, runSettings(&out, []string{"controller", "--config", conf, "--poll-interval", "5s"}))
	lines := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.Fields(l)
		lines[f[0]] = f[1:]
	}
	require.Equal(t, []string{"c9", conf + ":1"}, lines["cluster"])
	require.Equal(t, []string{"postgres://juice:xxxxx@db1/juice", conf + ":3"}, lines["database-url"])
	require.Equal(t, []string{"6", "environment", "variable", "JUICE_WORKERS"}, lines["workers"])
	require.Equal(t, []string{"5s", "flag"}, lines["poll-interval"])
	require.Equal(t, []string{"4", "default"}, lines["lookahead-per-pool"])
	require.NotContains(t, out.String(), "s3cret")

	require.NoError(t, runSettings(&out, []string{"hook", "--config", conf}), "the hook reads the same file")
	err := runSettings(&out, []string{"sbatch"})
	require.ErrorContains(t, err, `unknown command "sbatch"`)
	require.Equal(t, exitUsage, exitStatusOf(err))
}

// The shipped file names every setting of every command, with the built-in default where there is one, and
// nothing else: it is the reference an administrator edits.
func TestShippedConfigNamesEverySetting(t *testing.T) {
	b, err := os.ReadFile("../../deploy/juice-slurm.conf")
	require.NoError(t, err)
	shown := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(l, "#"), "=")
		if k = strings.TrimSuffix(k, " "); ok && strings.HasPrefix(l, "#") && k != "" && !strings.Contains(k, " ") {
			shown[k] = strings.TrimSpace(v)
		}
	}
	known := knownSettings()
	for name, ok := range known {
		if !ok {
			require.NotContains(t, shown, name, "%s is for the command line only", name)
			continue
		}
		_, ok := shown[name]
		require.True(t, ok, "deploy/juice-slurm.conf does not show %q", name)
	}
	for cmd, register := range settingCommands {
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		register(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if v, ok := shown[f.Name]; ok && f.DefValue != "" {
				require.Equal(t, f.DefValue, v, "deploy/juice-slurm.conf: the default of %s", f.Name)
			}
		})
	}
	for name := range shown {
		require.True(t, known[name], "deploy/juice-slurm.conf shows %q, which no command knows", name)
	}
}

func TestExitStatuses(t *testing.T) {
	require.Equal(t, exitUsage, exitStatusOf(run(context.Background(), []string{"frobnicate"})))
	require.Equal(t, exitUsage, exitStatusOf(run(context.Background(), []string{"describe", "job", "x1"})))
	require.Equal(t, exitUsage, exitStatusOf(run(context.Background(), []string{"status", "--config=", "--no-such-flag"})))
	require.Equal(t, exitUsage, exitStatusOf(run(context.Background(), []string{"status", "--config="})), "--database-url is required")
	require.Equal(t, exitFailed, exitStatusOf(errors.New("boom")))
	require.Equal(t, exitNotFound, exitStatusOf(fmt.Errorf("describe: %w", notFoundError{errors.New("no such job")})))
}

// --json and --all are about one invocation: the environment and the file do not set them.
func TestOutputSwitchesAreForTheCommandLineOnly(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "c.conf")
	require.NoError(t, os.WriteFile(conf, []byte("json = true\n"), 0o640))
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	statusFlags(fs)
	require.ErrorContains(t, parseFlags(fs, []string{"--config", conf}), `c.conf:1: unknown setting "json"`)
	t.Setenv("JUICE_JSON", "true")
	fs = flag.NewFlagSet("status", flag.ContinueOnError)
	o := statusFlags(fs)
	require.NoError(t, parseFlags(fs, []string{"--config="}))
	require.False(t, *o.json)
}

// The tests never read the host's settings file: an e2e run on the same host may be rewriting it.
func TestMain(m *testing.M) {
	defaultConfig = ""
	os.Exit(m.Run())
}

// The man page shows every command of the usage, and the version of the VERSION file.
func TestManPageNamesEveryCommand(t *testing.T) {
	page, err := os.ReadFile("../../docs/juice-slurm.8")
	require.NoError(t, err)
	version, err := os.ReadFile("../../VERSION")
	require.NoError(t, err)
	require.Contains(t, string(page), `"juice-slurm `+strings.TrimSpace(string(version))+`"`, "docs/juice-slurm.8's .TH version")
	for _, line := range strings.Split(usage, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "juice-slurm" {
			continue
		}
		require.Contains(t, string(page), ".B juice-slurm "+f[1], "the man page's SYNOPSIS lacks %q", f[1])
	}
}

// Finding 2 of issue 26: the shipped file showed slurm-token-file and juice-token-file as if their paths were
// built-in defaults, while both are empty. A value shown for a setting without a default must be marked, in
// the comment just above it, as an example or as required.
func TestShippedConfigMarksExamples(t *testing.T) {
	b, err := os.ReadFile("../../deploy/juice-slurm.conf")
	require.NoError(t, err)
	hasDefault := map[string]bool{}
	for cmd, register := range settingCommands {
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		register(fs)
		fs.VisitAll(func(f *flag.Flag) { hasDefault[f.Name] = hasDefault[f.Name] || f.DefValue != "" })
	}
	known := knownSettings()
	block := ""
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "# ") {
			block += " " + strings.ToLower(l)
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(l, "#"), "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if ok && strings.HasPrefix(l, "#") && known[k] && !hasDefault[k] && v != "" {
			require.True(t, strings.Contains(block, "example") || strings.Contains(block, "required"),
				"deploy/juice-slurm.conf shows %s = %s as if it were the default, but %s has none: say it is an example or required", k, v, k)
		}
		block = ""
	}
}

// licenses reads on or off, as JUICE_LICENSES does in juice-config.sh (true and false too); anything else is an
// error naming the value.
func TestLicensesSwitch(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--licenses"}, true}, {[]string{"--licenses=on"}, true}, {[]string{"--licenses=ON"}, true},
		{[]string{"--licenses=true"}, true}, {[]string{"--licenses=off"}, false}, {[]string{"--licenses=false"}, false}} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		on := switchFlag(fs, "licenses", "")
		require.NoError(t, fs.Parse(tc.args), tc.args)
		require.Equal(t, tc.want, *on, tc.args)
	}
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switchFlag(fs, "licenses", "")
	require.ErrorContains(t, fs.Parse([]string{"--licenses=yes"}), `"yes": want on or off`)
	require.Equal(t, "off", fs.Lookup("licenses").DefValue)
}
