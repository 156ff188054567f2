//go:build integration

// The integration suite: the same tests against a real slurmrestd of each Slurm release.
//
//	JUICE_SLURMREST_ENV=/var/tmp/juice-testbed/env                (Slurm 22.05 on the host)
//	JUICE_SLURMREST_ENV=/var/tmp/juice-testbed/chroot-trixie/env  (Slurm 24.11)
//	JUICE_SLURMREST_ENV=/var/tmp/juice-testbed/chroot-sid/env     (Slurm 26.05)
//	JUICE_SLURMREST_VERSION=v0.0.36                               (optional: force an API version)
//	go test -tags integration -run TestIntegration -v ./slurmrest/
//
// test/chroot/test-compat.sh runs it for every release with its newest and oldest API version.
// Without JUICE_SLURMREST_ENV the suite skips, except under CI=true, where it fails.
package slurmrest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

type testbed struct {
	env     map[string]string
	url     string
	user    string
	token   string // token file
	part    string
	chroot  string
	version string // forced, or ""
}

func loadTestbed(t *testing.T) *testbed {
	t.Helper()
	path := os.Getenv("JUICE_SLURMREST_ENV")
	missing := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...) +
			" (set JUICE_SLURMREST_ENV to a test bed env file, e.g. /var/tmp/juice-testbed/env after `make testbed-up`, " +
			"or /var/tmp/juice-testbed/chroot-sid/env after `test/chroot/slurm-chroot.sh up sid`)"
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and no Slurm test bed: " + msg)
		}
		t.Skip(msg)
	}
	if path == "" {
		missing("JUICE_SLURMREST_ENV is not set")
	}
	f, err := os.Open(path)
	if err != nil {
		missing("cannot read the test bed env file: %v", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		env[k] = strings.Trim(v, `"'`)
	}
	require.NoError(t, sc.Err())
	tb := &testbed{
		env:     env,
		url:     env["JUICE_TESTBED_SLURMRESTD_URL"],
		user:    env["JUICE_TESTBED_SLURM_USER"],
		token:   env["JUICE_TESTBED_TOKEN_FILE"],
		part:    env["JUICE_TESTBED_PARTITION"],
		chroot:  env["JUICE_TESTBED_CHROOT"],
		version: os.Getenv("JUICE_SLURMREST_VERSION"),
	}
	if tb.url == "" || tb.token == "" {
		missing("%s lacks JUICE_TESTBED_SLURMRESTD_URL or JUICE_TESTBED_TOKEN_FILE", path)
	}
	return tb
}

// scontrol runs the test bed's own scontrol (inside its chroot when it has one).
func (tb *testbed) scontrol(ctx context.Context, args ...string) (string, error) {
	var cmd *exec.Cmd
	if tb.chroot != "" {
		cmd = exec.CommandContext(ctx, "chroot", append([]string{tb.chroot, "scontrol"}, args...)...)
	} else {
		cmd = exec.CommandContext(ctx, "scontrol", args...)
		if conf := tb.env["JUICE_TESTBED_SLURM_CONF"]; conf != "" {
			cmd.Env = append(os.Environ(), "SLURM_CONF="+conf)
		}
	}
	// Never hand a REST token to scontrol as SLURM_JWT.
	cmd.Env = withoutVar(cmd.Env, "SLURM_JWT")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("scontrol %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

func withoutVar(env []string, name string) []string {
	if env == nil {
		env = os.Environ()
	}
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

func (tb *testbed) client(t *testing.T, ts slurmrest.TokenSource) *slurmrest.Client {
	t.Helper()
	c, err := slurmrest.New(slurmrest.Config{
		BaseURL:     tb.url,
		UserName:    tb.user,
		TokenSource: ts,
		Version:     tb.version,
		Logger:      testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
		Retry:       slurmrest.RetryConfig{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond},
	})
	require.NoError(t, err)
	return c
}

type suite struct {
	t   *testing.T
	tb  *testbed
	c   *slurmrest.Client
	ctx context.Context
	ids []uint32
}

func (s *suite) submit(t *testing.T, sub slurmrest.JobSubmission) uint32 {
	t.Helper()
	if sub.Partition == "" {
		sub.Partition = s.tb.part
	}
	if sub.Name == "" {
		sub.Name = "slurmrest-it"
	}
	id, err := s.c.SubmitJob(s.ctx, sub)
	require.NoError(t, err)
	require.NotZero(t, id)
	s.ids = append(s.ids, id)
	t.Cleanup(func() { _ = s.c.CancelJob(context.Background(), id) }) // free the node for the next test
	t.Logf("submitted job %d", id)
	return id
}

// waitFor polls GetJob until cond holds; it returns the job and the states seen on the way.
func (s *suite) waitFor(t *testing.T, id uint32, what string, timeout time.Duration, cond func(*slurmrest.Job) bool) (*slurmrest.Job, []slurmrest.JobState) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var seen []slurmrest.JobState
	for {
		j, err := s.c.GetJob(s.ctx, id)
		require.NoError(t, err, "GetJob(%d)", id)
		if len(seen) == 0 || seen[len(seen)-1] != j.State {
			seen = append(seen, j.State)
		}
		if cond(j) {
			return j, seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: not %s after %s; states seen %v, last %+v", id, what, timeout, seen, *j)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// waitLong bounds a wait for slurmctld to schedule or end a job; the main test bed's node is shared
// with other tests, so a job may wait for a free core.
const waitLong = 120 * time.Second

func TestIntegration(t *testing.T) {
	tb := loadTestbed(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := tb.client(t, slurmrest.FileToken(tb.token))
	s := &suite{t: t, tb: tb, c: c, ctx: ctx}
	t.Cleanup(func() {
		for _, id := range s.ids {
			_ = c.CancelJob(context.Background(), id)
		}
	})

	v, err := c.Negotiate(ctx)
	require.NoError(t, err)
	if tb.version != "" {
		require.Equal(t, tb.version, v)
	}
	require.NoError(t, c.Ping(ctx))
	t.Logf("slurmrestd %s: Slurm %s, API version %s", tb.url, c.SlurmRelease(), v)

	t.Run("Ping", func(t *testing.T) {
		require.NoError(t, c.Ping(ctx))
	})

	t.Run("Lifecycle", func(t *testing.T) {
		comment := "juice:it-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		id := s.submit(t, slurmrest.JobSubmission{
			Script:  "#!/bin/sh\nsleep 3\nexit 0\n",
			Comment: comment,
			Hold:    true,
		})
		j, err := c.GetJob(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, id, j.ID)
		assert.Equal(t, slurmrest.StatePending, j.State)
		assert.True(t, j.Held(), "held: reason %q priority %d", j.StateReason, j.Priority)
		assert.Equal(t, comment, j.Comment)
		assert.Equal(t, 0, j.Run)
		assert.True(t, j.Batch)
		assert.Equal(t, tb.part, j.Partition)
		assert.False(t, j.SubmitTime.IsZero())
		assert.True(t, j.StartTime.IsZero())
		if v != "v0.0.36" { // v0.0.36 leaves user_name empty
			assert.Equal(t, tb.user, j.UserName)
		}

		// The listing has it too.
		l, err := c.ListJobs(ctx, time.Time{})
		require.NoError(t, err)
		require.False(t, l.Unchanged)
		found := false
		for _, lj := range l.Jobs {
			if lj.ID == id {
				found = true
				assert.Equal(t, comment, lj.Comment)
				assert.Equal(t, slurmrest.StatePending, lj.State)
			}
		}
		assert.True(t, found, "job %d in ListJobs", id)

		// Comment update, then release.
		newComment := comment + "-updated"
		require.NoError(t, c.UpdateJob(ctx, id, slurmrest.JobUpdate{Comment: &newComment}))
		j, err = c.GetJob(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, newComment, j.Comment)
		assert.True(t, j.Held())

		release := false
		require.NoError(t, c.UpdateJob(ctx, id, slurmrest.JobUpdate{Hold: &release}))
		j, seen := s.waitFor(t, id, "running", waitLong, func(j *slurmrest.Job) bool {
			return j.State == slurmrest.StateRunning || j.State.IsFinished()
		})
		assert.False(t, j.Held())
		assert.NotZero(t, j.Priority)
		j, seen2 := s.waitFor(t, id, "finished", waitLong, func(j *slurmrest.Job) bool { return j.State.IsFinished() })
		// PENDING was seen before the release (asserted above); the job may start before the next poll.
		seen = append(append([]slurmrest.JobState{slurmrest.StatePending}, seen...), seen2...)
		t.Logf("states seen: %v", seen)
		assert.Contains(t, seen, slurmrest.StatePending)
		assert.Contains(t, seen, slurmrest.StateRunning)
		assert.Equal(t, slurmrest.StateCompleted, j.State)
		assert.Equal(t, slurmrest.ExitStatus{Exited: true, Code: 0}, j.ExitCode)
		assert.False(t, j.StartTime.IsZero())
		assert.False(t, j.EndTime.IsZero())
		assert.NotEmpty(t, j.Nodes)
	})

	t.Run("ExitCode", func(t *testing.T) {
		id := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\nexit 3\n"})
		j, _ := s.waitFor(t, id, "finished", waitLong, func(j *slurmrest.Job) bool { return j.State.IsFinished() })
		assert.Equal(t, slurmrest.StateFailed, j.State)
		assert.Equal(t, slurmrest.ExitStatus{Exited: true, Code: 3}, j.ExitCode)
		assert.Equal(t, 768, j.ExitCode.Raw())
	})

	t.Run("HoldReleaseCancel", func(t *testing.T) {
		id := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\nsleep 300\n", Hold: true})
		j, err := c.GetJob(ctx, id)
		require.NoError(t, err)
		require.True(t, j.Held())
		release, hold := false, true
		require.NoError(t, c.UpdateJob(ctx, id, slurmrest.JobUpdate{Hold: &release}))
		s.waitFor(t, id, "running", waitLong, func(j *slurmrest.Job) bool { return j.State == slurmrest.StateRunning })
		// slurmctld accepts a hold on a running job (priority 0, no effect until a requeue).
		err = c.UpdateJob(ctx, id, slurmrest.JobUpdate{Hold: &hold})
		t.Logf("hold of a running job: %v", err)
		require.NoError(t, c.CancelJob(ctx, id))
		j, seen := s.waitFor(t, id, "cancelled", waitLong, func(j *slurmrest.Job) bool { return j.State.IsFinished() })
		t.Logf("states seen after cancel: %v", seen)
		assert.Equal(t, slurmrest.StateCancelled, j.State)
		require.NoError(t, c.CancelJob(ctx, id), "cancelling a finished job is not an error")
	})

	t.Run("CancelPending", func(t *testing.T) {
		id := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\nsleep 300\n", Hold: true})
		require.NoError(t, c.CancelJob(ctx, id))
		j, _ := s.waitFor(t, id, "cancelled", 30*time.Second, func(j *slurmrest.Job) bool { return j.State.IsFinished() })
		assert.Equal(t, slurmrest.StateCancelled, j.State)
	})

	t.Run("Requeue", func(t *testing.T) {
		id := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\nsleep 300\n"})
		j, _ := s.waitFor(t, id, "running", waitLong, func(j *slurmrest.Job) bool { return j.State == slurmrest.StateRunning })
		require.Equal(t, 0, j.Run)
		can, err := c.CanRequeue(ctx)
		require.NoError(t, err)
		if can {
			require.NoError(t, c.RequeueJob(ctx, id))
		} else {
			require.ErrorIs(t, c.RequeueJob(ctx, id), slurmrest.ErrUnsupported)
			_, err := tb.scontrol(ctx, "requeue", strconv.FormatUint(uint64(id), 10))
			require.NoError(t, err)
		}
		j, seen := s.waitFor(t, id, "requeued (restart count 1)", waitLong, func(j *slurmrest.Job) bool {
			return j.Run == 1 && j.State == slurmrest.StatePending
		})
		t.Logf("requeued: states %v, reason %q, eligible %s", seen, j.StateReason, j.EligibleTime.Format(time.RFC3339))
		// A requeued job waits ~2 minutes (BeginTime): make it eligible now and see the second run start.
		require.NoError(t, c.UpdateJob(ctx, id, slurmrest.JobUpdate{BeginNow: true}))
		j, _ = s.waitFor(t, id, "running again", waitLong, func(j *slurmrest.Job) bool { return j.State == slurmrest.StateRunning })
		assert.Equal(t, 1, j.Run)
		require.NoError(t, c.CancelJob(ctx, id))
	})

	t.Run("JobStates", func(t *testing.T) {
		can, err := c.CanTrackStates(ctx)
		require.NoError(t, err)
		if legacy := strings.HasPrefix(v, "v0.0.3"); legacy {
			require.False(t, can, "%s has no jobs/state endpoint", v)
			_, err := c.JobStates(ctx, []uint32{1})
			require.ErrorIs(t, err, slurmrest.ErrUnsupported)
			return
		}
		require.True(t, can, "%s has jobs/state", v)
		held := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\nsleep 30\n", Hold: true})
		held2 := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\nsleep 30\n", Hold: true})
		// More ids than one request carries (StatesBatch): the unknown ones are absent, the two jobs answered once each.
		ids := []uint32{held}
		for i := uint32(0); i < slurmrest.StatesBatch; i++ {
			ids = append(ids, 4_000_000_000+i)
		}
		ids = append(ids, held2)
		got, err := c.JobStates(ctx, ids)
		require.NoError(t, err)
		byID := map[uint32]slurmrest.JobStatus{}
		for _, st := range got {
			byID[st.ID] = st
		}
		require.Len(t, got, 2, "%+v", got)
		assert.Equal(t, slurmrest.StatePending, byID[held].State)
		assert.Equal(t, slurmrest.StatePending, byID[held2].State)
		assert.False(t, byID[held].HasTask)
		require.NoError(t, c.CancelJob(ctx, held2))
		s.waitFor(t, held2, "cancelled", waitLong, func(j *slurmrest.Job) bool { return j.State == slurmrest.StateCancelled })
		got, err = c.JobStates(ctx, []uint32{held2})
		require.NoError(t, err)
		require.Len(t, got, 1)
		assert.Equal(t, slurmrest.StateCancelled, got[0].State)
	})

	t.Run("Begin", func(t *testing.T) {
		begin := time.Now().Add(7 * 24 * time.Hour).Truncate(time.Second)
		id := s.submit(t, slurmrest.JobSubmission{Script: "#!/bin/sh\ntrue\n", Begin: begin})
		j, err := c.GetJob(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, slurmrest.StatePending, j.State)
		assert.Equal(t, "BeginTime", j.StateReason)
		if !j.EligibleTime.IsZero() { // v0.0.36 does not say
			assert.Equal(t, begin.Unix(), j.EligibleTime.Unix())
		}
	})

	t.Run("NotFound", func(t *testing.T) {
		_, err := c.GetJob(ctx, 999999999)
		require.Error(t, err)
		assert.ErrorIs(t, err, slurmrest.ErrNotFound)
		var apiErr *slurmrest.APIError
		if errors.As(err, &apiErr) {
			t.Logf("unknown job: %v", apiErr)
		}
	})

	t.Run("Unchanged", func(t *testing.T) {
		l, err := c.ListJobs(ctx, time.Time{})
		require.NoError(t, err)
		require.False(t, l.Unchanged)
		require.False(t, l.LastUpdate.IsZero())
		if v == "v0.0.36" {
			next, err := c.ListJobs(ctx, l.LastUpdate)
			require.NoError(t, err)
			require.False(t, next.Unchanged)
			t.Skip("v0.0.36 has no update_time: every listing is a full one")
		}
		// Other tests' jobs may still be finishing: follow LastUpdate until a poll says unchanged.
		deadline := time.Now().Add(60 * time.Second)
		for {
			next, err := c.ListJobs(ctx, l.LastUpdate)
			require.NoError(t, err)
			if next.Unchanged {
				assert.Empty(t, next.Jobs)
				assert.Equal(t, l.LastUpdate, next.LastUpdate)
				break
			}
			require.False(t, time.Now().After(deadline), "never unchanged")
			l = next
			time.Sleep(time.Second)
		}
	})

	t.Run("TokenRotation", func(t *testing.T) {
		orig, err := os.ReadFile(tb.token)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "token")
		require.NoError(t, os.WriteFile(path, orig, 0o600))
		rc := tb.client(t, slurmrest.FileToken(path))
		_, err = rc.ListJobs(ctx, time.Time{})
		require.NoError(t, err)

		// A refused token (the right shape, a wrong signature).
		bad := strings.TrimSpace(string(orig))
		bad = bad[:len(bad)-4] + "AAAA"
		require.NoError(t, os.WriteFile(path, []byte(bad+"\n"), 0o600))
		_, err = rc.ListJobs(ctx, time.Time{})
		require.Error(t, err)
		t.Logf("refused token: %v", err)
		assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)

		// A fresh token written while the client runs is picked up.
		out, err := tb.scontrol(ctx, "token", "username="+tb.user, "lifespan=600")
		require.NoError(t, err)
		fresh := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "SLURM_JWT="))
		require.NotEqual(t, strings.TrimSpace(string(orig)), fresh)
		require.NoError(t, os.WriteFile(path, []byte(fresh+"\n"), 0o600))
		_, err = rc.ListJobs(ctx, time.Time{})
		require.NoError(t, err)
		require.NoError(t, rc.Ping(ctx))
	})
}
