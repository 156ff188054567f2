package slurmrest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// The replies of the real daemons (recorded on 24.11.5 and 26.05.5): a held job, and an array of three asked by its
// job id, which answers with one entry per element. v0.0.40 names an element by the array's job id (1395_1), v0.0.42
// by its own (1396_1).
func TestReplayJobStates(t *testing.T) {
	ctx := context.Background()
	for _, rc := range recorded {
		if legacy(rc.version) {
			continue
		}
		t.Run(rc.release+"-"+rc.version, func(t *testing.T) {
			c, rs := newReplay(t, rc.release, rc.version, map[string]string{"GET /jobs/state/": "job_states"})
			can, err := c.CanTrackStates(ctx)
			require.NoError(t, err)
			require.True(t, can)
			got, err := c.JobStates(ctx, []uint32{1, 2, 3})
			require.NoError(t, err)
			require.Equal(t, 1, rs.count())
			require.Len(t, got, 4)
			assert.False(t, got[0].HasTask)
			assert.Equal(t, slurmrest.StatePending, got[0].State)
			for _, e := range got[1:] {
				assert.True(t, e.HasTask, "%+v", e)
			}
			assert.Equal(t, []uint32{1, 2, 3}, []uint32{got[1].Task, got[2].Task, got[3].Task})
		})
	}
}

func TestJobStatesUnsupportedOnV0038(t *testing.T) {
	for _, v := range []string{"v0.0.36", "v0.0.37", "v0.0.38"} {
		requests := 0
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests++ }))
		c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: v})
		require.NoError(t, err)
		can, err := c.CanTrackStates(context.Background())
		require.NoError(t, err)
		assert.False(t, can, v)
		_, err = c.JobStates(context.Background(), []uint32{7})
		require.ErrorIs(t, err, slurmrest.ErrUnsupported, v)
		assert.Zero(t, requests, "%s: nothing is sent", v)
		srv.Close()
	}
}

// Long id lists go out StatesBatch at a time, each id once, as the repeated parameter the daemons accept (their
// documented CSV form fails: 400 on 24.11.5, 500 on 26.05.5, testdata/replies/26.05-v0.0.45/job_states_csv.json).
func TestJobStatesBatches(t *testing.T) {
	var mu sync.Mutex
	var requests int
	asked := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		requests++
		ids := r.URL.Query()["job_id"]
		if len(ids) > slurmrest.StatesBatch || strings.Contains(r.URL.RawQuery, ",") {
			http.Error(w, "Unspecified error", http.StatusInternalServerError)
			return
		}
		var b strings.Builder
		b.WriteString(`{"jobs":[`)
		for i, id := range ids {
			asked[id]++
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"job_id":"` + id + `","state":["RUNNING","CONFIGURING"]}`)
		}
		b.WriteString(`],"errors":[],"warnings":[]}`)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(b.String()))
	}))
	defer srv.Close()
	c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.45"})
	require.NoError(t, err)
	n := 2*slurmrest.StatesBatch + 1
	ids := make([]uint32, n)
	for i := range ids {
		ids[i] = uint32(1000 + i)
	}
	got, err := c.JobStates(context.Background(), ids)
	require.NoError(t, err)
	require.Len(t, got, n)
	assert.Equal(t, 3, requests)
	assert.Len(t, asked, n)
	for _, st := range got {
		assert.Equal(t, slurmrest.StateConfiguring, st.State)
		assert.Equal(t, 1, asked[strconv.FormatUint(uint64(st.ID), 10)])
	}
	none, err := c.JobStates(context.Background(), nil)
	require.NoError(t, err)
	assert.Empty(t, none)
	assert.Equal(t, 3, requests, "no ids, no request")
}

// A reply entry that is not a job id fails the call, naming it, rather than being dropped.
func TestJobStatesBadEntry(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"jobs":[{"job_id":"abc","state":["PENDING"]}],"errors":[]}`))
	}))
	defer srv.Close()
	c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.42"})
	require.NoError(t, err)
	_, err = c.JobStates(context.Background(), []uint32{5})
	require.ErrorContains(t, err, `"abc"`)
}

// AllJobStates is one request without job_id; v0.0.3x has none.
func TestAllJobStates(t *testing.T) {
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		queries = append(queries, r.URL.Path+"?"+r.URL.RawQuery)
		w.Write([]byte(`{"jobs":[{"job_id":"5","state":["PENDING"]},{"job_id":"9_2","state":["RUNNING"]}],"errors":[]}`))
	}))
	defer srv.Close()
	c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.45"})
	require.NoError(t, err)
	got, err := c.AllJobStates(context.Background())
	require.NoError(t, err)
	require.Equal(t, []string{"/slurm/v0.0.45/jobs/state/?"}, queries)
	require.Len(t, got, 2)
	assert.Equal(t, slurmrest.JobStatus{ID: 9, Task: 2, HasTask: true, State: slurmrest.StateRunning}, got[1])
	old, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, Version: "v0.0.38"})
	require.NoError(t, err)
	_, err = old.AllJobStates(context.Background())
	require.ErrorIs(t, err, slurmrest.ErrUnsupported)
	assert.Len(t, queries, 1)
}
