package slurmrest_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// Recorded replies: testdata/replies/RELEASE-VERSION/NAME.json holds the body, then the HTTP status on
// the last line (testdata/record.sh writes them from the real daemons).
var recorded = []struct{ release, version string }{
	{"22.05", "v0.0.36"}, {"22.05", "v0.0.38"},
	{"24.11", "v0.0.40"}, {"24.11", "v0.0.42"},
	{"26.05", "v0.0.42"}, {"26.05", "v0.0.45"},
}

func loadReply(t testing.TB, dir, name string) (int, []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "replies", dir, name+".json"))
	require.NoError(t, err)
	b = bytes.TrimRight(b, "\n")
	i := bytes.LastIndexByte(b, '\n')
	status, err := strconv.Atoi(string(b[i+1:]))
	require.NoError(t, err, "status line of %s/%s", dir, name)
	if i < 0 {
		return status, nil
	}
	return status, b[:i]
}

var jobIDRE = regexp.MustCompile(`/job/\d+`)

// replayServer answers "METHOD /path" (the path below /slurm/VERSION, job ids as {id}, "?since" when
// update_time is given) with the named recorded reply.
type replayServer struct {
	t      *testing.T
	dir    string
	routes map[string]string
	mu     sync.Mutex
	calls  []string
}

func (rs *replayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if i := strings.Index(p, "/slurm/v"); i >= 0 {
		p = p[i+len("/slurm/"):]
		p = p[strings.IndexByte(p, '/'):]
	}
	p = jobIDRE.ReplaceAllString(p, "/job/{id}")
	key := r.Method + " " + p
	if r.URL.Query().Has("update_time") {
		key += "?since"
	}
	rs.mu.Lock()
	rs.calls = append(rs.calls, key)
	rs.mu.Unlock()
	name, ok := rs.routes[key]
	if !ok {
		http.Error(w, "no route "+key, http.StatusNotFound)
		return
	}
	status, body := loadReply(rs.t, rs.dir, name)
	if status != http.StatusNotModified {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	w.Write(body)
}

func (rs *replayServer) count() int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return len(rs.calls)
}

func newReplay(t *testing.T, release, version string, routes map[string]string) (*slurmrest.Client, *replayServer) {
	t.Helper()
	rs := &replayServer{t: t, dir: release + "-" + version, routes: routes}
	srv := httptest.NewServer(rs)
	t.Cleanup(srv.Close)
	c, err := slurmrest.New(slurmrest.Config{
		BaseURL:     srv.URL,
		UserName:    "juice",
		TokenSource: slurmrest.StaticToken("not-a-jwt"),
		Version:     version,
		Retry:       slurmrest.RetryConfig{MaxAttempts: 3, InitialBackoff: time.Millisecond},
	})
	require.NoError(t, err)
	return c, rs
}

func legacy(v string) bool { return strings.HasPrefix(v, "v0.0.3") }

func slash(v string) string {
	if legacy(v) {
		return ""
	}
	return "/"
}

func TestReplayJobs(t *testing.T) {
	ctx := context.Background()
	for _, rc := range recorded {
		t.Run(rc.release+"-"+rc.version, func(t *testing.T) {
			v, s := rc.version, slash(rc.version)

			c, _ := newReplay(t, rc.release, v, map[string]string{"GET /job/{id}": "job_held"})
			j, err := c.GetJob(ctx, jobID(t, rc.release+"-"+v, "job_held"))
			require.NoError(t, err)
			assert.Equal(t, slurmrest.StatePending, j.State)
			assert.True(t, j.Held(), "held: %q %d", j.StateReason, j.Priority)
			assert.Equal(t, "JobHeldUser", j.StateReason)
			assert.Equal(t, "juice:rec", j.Comment)
			assert.Equal(t, 0, j.Run)
			assert.True(t, j.Batch)
			assert.Equal(t, "debug", j.Partition)
			assert.NotZero(t, j.UserID)
			if v != "v0.0.36" {
				assert.NotEmpty(t, j.UserName)
			}
			assert.False(t, j.SubmitTime.IsZero())
			assert.True(t, j.StartTime.IsZero())
			assert.Equal(t, slurmrest.ExitStatus{}, j.ExitCode, "no exit status before the end")

			c, _ = newReplay(t, rc.release, v, map[string]string{"GET /job/{id}": "job_failed"})
			j, err = c.GetJob(ctx, jobID(t, rc.release+"-"+v, "job_failed"))
			require.NoError(t, err)
			assert.Equal(t, slurmrest.StateFailed, j.State)
			assert.True(t, j.State.IsFinished())
			assert.Equal(t, "NonZeroExitCode", j.StateReason)
			assert.Equal(t, slurmrest.ExitStatus{Exited: true, Code: 3}, j.ExitCode)
			assert.Equal(t, 768, j.ExitCode.Raw())
			assert.NotEmpty(t, j.Nodes)
			assert.NotZero(t, j.Priority)
			assert.False(t, j.StartTime.IsZero())
			assert.False(t, j.EndTime.IsZero())
			assert.False(t, j.EligibleTime.IsZero())
			assert.True(t, !j.EndTime.Before(j.StartTime))

			c, rs := newReplay(t, rc.release, v, map[string]string{"GET /job/{id}": "job_notfound"})
			_, err = c.GetJob(ctx, 999999999)
			require.Error(t, err)
			assert.ErrorIs(t, err, slurmrest.ErrNotFound)
			assert.Equal(t, 1, rs.count(), "a NotFound is not retried")
			var apiErr *slurmrest.APIError
			require.ErrorAs(t, err, &apiErr)
			assert.NotEmpty(t, apiErr.Errors)

			c, _ = newReplay(t, rc.release, v, map[string]string{
				"GET /jobs" + s:            "jobs",
				"GET /jobs" + s + "?since": "jobs_unchanged",
			})
			l, err := c.ListJobs(ctx, time.Time{})
			require.NoError(t, err)
			assert.False(t, l.Unchanged)
			require.Len(t, l.Jobs, 1)
			assert.Equal(t, slurmrest.StateFailed, l.Jobs[0].State)
			assert.False(t, l.LastUpdate.IsZero())
			since := l.LastUpdate
			l, err = c.ListJobs(ctx, since)
			require.NoError(t, err)
			if v == "v0.0.36" { // no update_time: the client asks for (and gets) the full list
				assert.False(t, l.Unchanged)
				assert.Len(t, l.Jobs, 1)
			} else {
				assert.True(t, l.Unchanged)
				assert.Empty(t, l.Jobs)
				assert.Equal(t, since, l.LastUpdate)
			}

			c, rs = newReplay(t, rc.release, v, map[string]string{"GET /jobs" + s: "jobs_badtoken"})
			_, err = c.ListJobs(ctx, time.Time{})
			require.Error(t, err)
			assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)
			assert.Equal(t, 1, rs.count(), "a refused token is not retried")

			c, _ = newReplay(t, rc.release, v, map[string]string{"POST /job/{id}": "update_release"})
			hold := false
			require.NoError(t, c.UpdateJob(ctx, 1, slurmrest.JobUpdate{Hold: &hold, BeginNow: true}))

			c, _ = newReplay(t, rc.release, v, map[string]string{"POST /job/{id}": "update_badbody"})
			comment := "x"
			err = c.UpdateJob(ctx, 1, slurmrest.JobUpdate{Comment: &comment})
			status, _ := loadReply(t, rc.release+"-"+v, "update_badbody")
			if legacy(v) {
				require.Error(t, err, "errors[] is checked even on %d", status)
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, status, apiErr.StatusCode)
				assert.NotEmpty(t, apiErr.Errors)
			} else {
				require.NoError(t, err, "24.11+ only warns about a bad field")
			}

			c, _ = newReplay(t, rc.release, v, map[string]string{"DELETE /job/{id}": "cancel_finished"})
			require.NoError(t, c.CancelJob(ctx, 1))

			c, _ = newReplay(t, rc.release, v, map[string]string{"POST /job/submit": "submit_held"})
			id, err := c.SubmitJob(ctx, slurmrest.JobSubmission{Script: "#!/bin/sh\ntrue\n", Hold: true, Comment: "juice:rec"})
			require.NoError(t, err, "a held submission succeeds")
			assert.Equal(t, jobID(t, rc.release+"-"+v, "submit_held"), id)

			c, _ = newReplay(t, rc.release, v, map[string]string{"GET /ping" + s: "ping"})
			require.NoError(t, c.Ping(ctx))
			assert.Contains(t, c.SlurmRelease(), rc.release+".")

			c, _ = newReplay(t, rc.release, v, map[string]string{"GET /ping" + s: "ping_badtoken"})
			err = c.Ping(ctx)
			require.Error(t, err)
			switch {
			case legacy(v), v == "v0.0.45":
				assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)
			default: // 24.11 and 26.05's v0.0.42 only say the controller is DOWN
				assert.ErrorIs(t, err, slurmrest.ErrControllerDown)
			}

			c, _ = newReplay(t, rc.release, v, map[string]string{"GET /job/{id}/requeue": "requeue"})
			err = c.RequeueJob(ctx, 1)
			if v >= "v0.0.45" {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, slurmrest.ErrUnsupported)
			}
		})
	}
}

func TestReplayRequeued(t *testing.T) {
	c, _ := newReplay(t, "26.05", "v0.0.45", map[string]string{"GET /job/{id}": "job_requeued"})
	j, err := c.GetJob(context.Background(), jobID(t, "26.05-v0.0.45", "job_requeued"))
	require.NoError(t, err)
	assert.Equal(t, 1, j.Run)
	assert.Equal(t, slurmrest.StatePending, j.State)
	assert.Equal(t, "BeginTime", j.StateReason)
	assert.True(t, j.EligibleTime.After(j.SubmitTime))
}

func TestAdminCommentUnsupportedOnV0038(t *testing.T) {
	c, rs := newReplay(t, "22.05", "v0.0.38", nil)
	ac := "juice:x"
	err := c.UpdateJob(context.Background(), 1, slurmrest.JobUpdate{AdminComment: &ac})
	require.ErrorIs(t, err, slurmrest.ErrUnsupported)
	assert.Zero(t, rs.count())
}

// jobID reads the job id of a recorded reply (the listing's first job, or a submission's job_id).
func jobID(t *testing.T, dir, name string) uint32 {
	t.Helper()
	_, body := loadReply(t, dir, name)
	m := regexp.MustCompile(`"job_id"\s*:\s*(\d+)`).FindSubmatch(body)
	require.NotNil(t, m, "job_id in %s/%s", dir, name)
	n, err := strconv.ParseUint(string(m[1]), 10, 32)
	require.NoError(t, err)
	return uint32(n)
}

func TestNegotiateFromOpenAPIDocument(t *testing.T) {
	var srvVersions []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/openapi/v3" {
			http.NotFound(w, r)
			return
		}
		paths := []string{`"/openapi/v3":{}`}
		for _, v := range srvVersions {
			paths = append(paths, fmt.Sprintf(`"/slurm/%s/ping/":{}`, v), fmt.Sprintf(`"/slurm/%s/jobs/":{}`, v))
		}
		fmt.Fprintf(w, `{"openapi":"3.0.2","paths":{%s}}`, strings.Join(paths, ","))
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, tc := range []struct {
		offered []string
		want    string
	}{
		{[]string{"v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"}, "v0.0.45"},
		{[]string{"v0.0.40", "v0.0.41", "v0.0.42"}, "v0.0.42"},
		{[]string{"v0.0.36", "v0.0.37", "v0.0.38", "dbv0.0.38"}, "v0.0.38"},
		{[]string{"v0.0.39", "v0.0.46"}, ""},
	} {
		srvVersions = tc.offered
		c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL})
		require.NoError(t, err)
		assert.Equal(t, "", c.Version())
		v, err := c.Negotiate(context.Background())
		if tc.want == "" {
			assert.ErrorIs(t, err, slurmrest.ErrNoVersion)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, v)
		assert.Equal(t, tc.want, c.Version())
	}
}

func TestNegotiateByPing(t *testing.T) {
	// No OpenAPI document (e.g. a proxy that only forwards /slurm/): ping each version, newest first.
	// (A 401 there is a refused token: Negotiate then fails with ErrUnauthorized at once.)
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.Path)
		switch r.URL.Path {
		case "/slurm/v0.0.38/ping":
			w.Write([]byte(`{"errors":[],"pings":[{"hostname":"h","ping":"UP"}]}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, TokenSource: slurmrest.StaticToken("t")})
	require.NoError(t, err)
	require.NoError(t, c.Ping(context.Background()))
	assert.Equal(t, "v0.0.38", c.Version())
	assert.Contains(t, seen, "/slurm/v0.0.45/ping/")
}

func TestForcedVersion(t *testing.T) {
	c, err := slurmrest.New(slurmrest.Config{BaseURL: "http://127.0.0.1:1", Version: "v0.0.40"})
	require.NoError(t, err)
	assert.Equal(t, "v0.0.40", c.Version())
	_, err = slurmrest.New(slurmrest.Config{BaseURL: "http://127.0.0.1:1", Version: "v0.0.39"})
	assert.Error(t, err)
	_, err = slurmrest.New(slurmrest.Config{BaseURL: "ftp://x"})
	assert.Error(t, err)
}

func TestRetries(t *testing.T) {
	var n int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		switch {
		case r.URL.Path == "/slurm/v0.0.42/job/7" && k <= 2:
			w.WriteHeader(http.StatusInternalServerError) // slurmctld unreachable
			w.Write([]byte(`{"errors":[{"error_number":1800,"error":"Unable to contact slurm controller (connect failure)"}]}`))
		case r.URL.Path == "/slurm/v0.0.42/job/7":
			w.Write([]byte(`{"jobs":[{"job_id":7,"job_state":["RUNNING","CONFIGURING"]}],"errors":[]}`))
		case r.URL.Path == "/slurm/v0.0.42/job/8":
			w.WriteHeader(http.StatusServiceUnavailable)
		case r.URL.Path == "/slurm/v0.0.42/job/submit":
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.42",
		Retry: slurmrest.RetryConfig{MaxAttempts: 5, InitialBackoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond}})
	require.NoError(t, err)

	j, err := c.GetJob(context.Background(), 7)
	require.NoError(t, err)
	assert.Equal(t, slurmrest.StateConfiguring, j.State)
	assert.Equal(t, []string{"CONFIGURING"}, j.StateFlags)
	assert.Equal(t, 3, n)

	n = 0
	_, err = c.GetJob(context.Background(), 8)
	var apiErr *slurmrest.APIError
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 503, apiErr.StatusCode)
	assert.Equal(t, 5, n, "bounded by MaxAttempts")

	// The context bounds the retries.
	c2, _ := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.42",
		Retry: slurmrest.RetryConfig{MaxAttempts: 1000, InitialBackoff: 20 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c2.GetJob(ctx, 8)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 2*time.Second)

	// A submission is not repeated after the server saw it.
	n = 0
	_, err = c.SubmitJob(context.Background(), slurmrest.JobSubmission{Script: "#!/bin/sh\n"})
	require.Error(t, err)
	assert.Equal(t, 1, n)
}

func TestConnectionRefusedIsRetried(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens: connection refused
	c, err := slurmrest.New(slurmrest.Config{BaseURL: "http://" + addr, Version: "v0.0.42",
		Retry: slurmrest.RetryConfig{MaxAttempts: 3, InitialBackoff: time.Millisecond}})
	require.NoError(t, err)
	err = c.Ping(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused")
}

func TestUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "slurmrestd.socket")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Empty(t, r.Header.Get("X-SLURM-USER-TOKEN"), "rest_auth/local: no token")
		w.Write([]byte(`{"pings":[{"hostname":"h","pinged":"UP","responding":true}],"errors":[]}`))
	}))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	c, err := slurmrest.New(slurmrest.Config{BaseURL: "unix://" + sock, Version: "v0.0.45"})
	require.NoError(t, err)
	require.NoError(t, c.Ping(context.Background()))
}

func TestHeadersAndExpiredToken(t *testing.T) {
	var gotUser, gotToken string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUser, gotToken = r.Header.Get("X-SLURM-USER-NAME"), r.Header.Get("X-SLURM-USER-TOKEN")
		w.Write([]byte(`{"pings":[{"hostname":"h","ping":"UP"}],"errors":[]}`))
	}))
	defer srv.Close()
	valid := fakeJWT(time.Now().Add(time.Hour))
	c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.38", UserName: "juice",
		TokenSource: slurmrest.StaticToken("SLURM_JWT=" + valid + "\n")})
	require.NoError(t, err)
	require.NoError(t, c.Ping(context.Background()))
	assert.Equal(t, "juice", gotUser)
	assert.Equal(t, valid, gotToken)

	gotToken = ""
	c, _ = slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.38", UserName: "juice",
		TokenSource: slurmrest.StaticToken(fakeJWT(time.Now().Add(-time.Minute)))})
	err = c.Ping(context.Background())
	assert.ErrorIs(t, err, slurmrest.ErrUnauthorized)
	assert.Empty(t, gotToken, "an expired token is not sent")
}
