package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// SIGHUP re-reads the file and retunes the running controller; it never stops it, and a file that does not parse
// changes nothing. The controller runs in this process, against the test bed's PostgreSQL (slurmrestd and the
// Juice Controller need not answer for this).
func TestSighupRetunesAndNeverStops(t *testing.T) {
	owner := testbed.NewDatabase(t)
	// Migrated as the owner role; the controller runs as the runtime role and never migrates.
	require.NoError(t, run(context.Background(), []string{"migrate", "--config=", "--database-url", owner,
		"--runtime-role", testbed.Require(t).RuntimeRole()}))
	dbURL := testbed.RuntimeURL(t, owner)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	// No metrics listener: its default port (the hook API's + 1000) is not reserved by the test, and another
	// process may hold it, which stopped the controller at start on a loaded machine.
	base := "cluster = hup\ndatabase-url = " + dbURL + "\njuice-token-file = " + write("juice.token", "m2m_test\n") +
		"\nslurm-token-file = " + write("slurm.token", "a.b.c\n") +
		"\ncluster-key = " + write("cluster.key", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n") +
		"\nhook-secret = " + write("hook.secret", "a-hook-secret-of-some-length\n") +
		"\nhook-listen = " + addr + "\nmetrics-listen = none\nhook-cert =\nslurmrestd-url = http://127.0.0.1:1\njuice-url = http://127.0.0.1:1\n"
	conf := write("juice-slurm.conf", base+"poll-interval = 1h\nlookahead-per-pool = 2\nlog-level = info\n")

	retunes := make(chan controller.Tuning, 4)
	levels := make(chan zapcore.Level, 4)
	onRetune = func(tu controller.Tuning, l zapcore.Level) { retunes <- tu; levels <- l }
	t.Cleanup(func() { onRetune = func(controller.Tuning, zapcore.Level) {} })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"controller", "--config", conf, "--log-format", "console"}) }()
	serving := func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	deadline := time.Now().Add(30 * time.Second)
	for !serving() {
		select {
		case err := <-done:
			t.Fatalf("the controller stopped at start: %v", err)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the controller's hook API is not ready within 30s")
		time.Sleep(20 * time.Millisecond)
	}

	write("juice-slurm.conf", base+"poll-interval = 1h\nlookahead-per-pool = 7\nlookahead-window = 5m\nlog-level = debug\ncluster = renamed\n")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	select {
	case tu := <-retunes:
		require.Equal(t, 7, tu.Lookahead.PerPool)
		require.Equal(t, 5*time.Minute, tu.Lookahead.Window)
		require.Equal(t, time.Hour, tu.PollInterval)
		require.Equal(t, zapcore.DebugLevel, <-levels)
	case err := <-done:
		t.Fatalf("SIGHUP stopped the controller: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no retune within 10s of SIGHUP")
	}

	write("juice-slurm.conf", base+"poll-interval = soon\n")
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
	select {
	case tu := <-retunes:
		t.Fatalf("a file that does not parse retuned the controller: %+v", tu)
	case err := <-done:
		t.Fatalf("SIGHUP with a bad file stopped the controller: %v", err)
	case <-time.After(time.Second): // the signals were handled or are queued; either way nothing may change
	}
	require.True(t, serving(), "still serving")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the controller did not stop within 10s of its context")
	}
}

func TestTokenExpiryNote(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	jwt := func(exp int64) string {
		payload := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d,"sun":"slurm"}`, exp)))
		return "eyJhbGciOiJIUzI1NiJ9." + payload + ".c2ln"
	}
	for _, tc := range []struct {
		name string
		tok  string
		warn bool
		msg  string
	}{
		{"expired", jwt(now.Add(-time.Minute).Unix()), true, "has expired"},
		{"within the hour", jwt(now.Add(59 * time.Minute).Unix()), true, "within the hour"},
		{"a day left", jwt(now.Add(24 * time.Hour).Unix()), false, "slurmrestd token"},
		{"not a JWT", "m2m_token", false, ""},
	} {
		warn, msg, _ := tokenExpiryNote(tc.tok, now)
		if warn != tc.warn || !strings.Contains(msg, tc.msg) || (tc.msg == "" && msg != "") {
			t.Errorf("%s: warn %v, %q; want warn %v and %q", tc.name, warn, msg, tc.warn, tc.msg)
		}
	}
}

// A previous cluster key that group or others may read, or that is not a key, stops the controller at start: it
// is never taken for an absent one (the plugin would refuse every session with it).
func TestControllerRefusesABadPreviousKey(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "cluster.key")
	require.NoError(t, os.WriteFile(key, []byte(strings.Repeat("ab", 32)+"\n"), 0o600))
	token := filepath.Join(dir, "juice.token")
	require.NoError(t, os.WriteFile(token, []byte("m2m_test\n"), 0o600))
	args := []string{"controller", "--config=", "--cluster", "c", "--database-url", "postgres://nobody@127.0.0.1:1/x",
		"--juice-token-file", token, "--slurm-token-file", token, "--cluster-key", key}
	for content, mode := range map[string]os.FileMode{strings.Repeat("cd", 32): 0o640, "not a key": 0o600} {
		require.NoError(t, os.WriteFile(key+".previous", []byte(content), mode))
		require.NoError(t, os.Chmod(key+".previous", mode))
		err := run(context.Background(), args)
		require.ErrorContains(t, err, "previous cluster key", "mode %04o", mode)
	}
}

// Finding 2 of issue 26: without slurm-token-file the controller took its slurmrestd token from an undocumented
// environment variable, and when that was empty every poll failed. Now slurm-token-file is the one source, and
// a controller without it (or with one it cannot read) does not start, saying which setting to give; only
// slurmrestd over a unix socket (rest_auth/local) needs no token.
func TestControllerRefusesWithoutASlurmToken(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "juice.token")
	require.NoError(t, os.WriteFile(token, []byte("m2m_test\n"), 0o600))
	args := []string{"controller", "--config=", "--cluster", "c", "--database-url", "postgres://nobody@127.0.0.1:1/x",
		"--juice-token-file", token, "--cluster-key", filepath.Join(dir, "no.key")}
	t.Setenv("JUICE_SLURM_TOKEN", "a.b.c")
	err := run(context.Background(), args)
	require.ErrorContains(t, err, "slurm-token-file is required")
	require.Equal(t, exitUsage, exitStatusOf(err))

	err = run(context.Background(), append(args, "--slurm-token-file", filepath.Join(dir, "missing.token")))
	require.ErrorContains(t, err, "slurm-token-file")
	require.ErrorContains(t, err, "missing.token")

	// Over a unix socket no token is needed: start-up goes on to the next check (the cluster key, absent here).
	err = run(context.Background(), append(args, "--slurmrestd-url", "unix:///run/slurmrestd.sock"))
	require.ErrorContains(t, err, "no.key")
	require.NotContains(t, err.Error(), "slurm-token-file")
}
