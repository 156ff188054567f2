package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	require.ErrorContains(t, err, `c.conf:3: want 'flag = value'`)

	t.Setenv("JUICE_POLL_INTERVAL", "never")
	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	fs.Duration("poll-interval", time.Second, "")
	err = parseFlags(fs, nil)
	require.ErrorContains(t, err, `environment variable JUICE_POLL_INTERVAL: invalid value "never"`)

	fs = flag.NewFlagSet("t", flag.ContinueOnError)
	require.ErrorContains(t, parseFlags(fs, []string{"stray"}), `unexpected argument "stray"`)
	require.Error(t, parseFlags(flag.NewFlagSet("t", flag.ContinueOnError), []string{"--config", filepath.Join(dir, "missing")}))
}
