//go:build smoke

// Package smoke proves the test bed is real: a batch job submitted through slurmrestd runs to completion on the
// real slurmd, and PostgreSQL answers queries. It talks raw HTTP on purpose, so a fault in our own slurmrest
// client can never hide a broken test bed.
package smoke

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// rest calls slurmrestd and fails the test on any error in the reply, except the error numbers in allowed.
func rest(t *testing.T, env testbed.Env, method, path string, body any, allowed ...float64) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	tok, err := os.ReadFile(env.TokenFile())
	require.NoError(t, err)
	req, err := http.NewRequest(method, env.SlurmrestdURL()+path, rd)
	require.NoError(t, err)
	req.Header.Set("X-SLURM-USER-NAME", env.SlurmUser())
	req.Header.Set("X-SLURM-USER-TOKEN", strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equalf(t, http.StatusOK, resp.StatusCode, "%s %s: %s", method, path, raw)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	errs, _ := out["errors"].([]any)
	for _, e := range errs {
		code, _ := e.(map[string]any)["error_code"].(float64)
		require.Containsf(t, allowed, code, "%s %s: slurmrestd error %v", method, path, e)
	}
	return out
}

func TestBatchJobThroughSlurmrestd(t *testing.T) {
	env := testbed.Require(t)
	comment := fmt.Sprintf("smoke-%d", time.Now().UnixNano())
	out := rest(t, env, http.MethodPost, "/slurm/v0.0.38/job/submit", map[string]any{
		"script": "#!/bin/sh\nsleep 2\necho smoke\n",
		"job": map[string]any{
			"name":                      "smoke",
			"partition":                 env.Partition(),
			"comment":                   comment,
			"current_working_directory": "/tmp",
			"environment":               map[string]string{"PATH": "/usr/bin:/bin"},
			// Held at first, so the test sees PENDING for certain before it lets the job go.
			"hold": true,
		},
		// 22.05 reports a held submission as error 2042 "Job is in held state" although the job was created.
	}, 2042)
	id := int(out["job_id"].(float64))
	require.NotZero(t, id)
	t.Logf("submitted job %d", id)

	job := func() map[string]any {
		jobs := rest(t, env, http.MethodGet, fmt.Sprintf("/slurm/v0.0.38/job/%d", id), nil)["jobs"].([]any)
		require.Len(t, jobs, 1)
		return jobs[0].(map[string]any)
	}
	j := job()
	require.Equal(t, "PENDING", j["job_state"])
	require.Equal(t, comment, j["comment"])

	rest(t, env, http.MethodPost, fmt.Sprintf("/slurm/v0.0.38/job/%d", id), map[string]any{"hold": false})
	seen := map[string]bool{}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		state := job()["job_state"].(string)
		if !seen[state] {
			t.Logf("job %d: %s", id, state)
		}
		seen[state] = true
		if state == "COMPLETED" {
			break
		}
		require.NotContains(t, []string{"FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL"}, state)
		time.Sleep(200 * time.Millisecond)
	}
	require.True(t, seen["RUNNING"], "job %d never seen RUNNING: %v", id, seen)
	require.True(t, seen["COMPLETED"], "job %d never COMPLETED: %v", id, seen)
	require.Equal(t, comment, job()["comment"])
}

func TestPostgres(t *testing.T) {
	url := testbed.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT 40 + 2").Scan(&n))
	require.Equal(t, 42, n)
	var version string
	require.NoError(t, pool.QueryRow(ctx, "SHOW server_version").Scan(&version))
	require.True(t, strings.HasPrefix(version, "15"), version)
}
