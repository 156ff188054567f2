package slurmrest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// memTransport answers every request with the same body, without a network.
type memTransport struct{ body []byte }

func (m memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{
		StatusCode:    http.StatusOK,
		ContentLength: int64(len(m.body)),
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(m.body)),
		Request:       r,
	}, nil
}

var benchJobIDRE = regexp.MustCompile(`"job_id":\d+`)

// syntheticListing builds a GET jobs reply with n copies of a recorded job (distinct ids), in the
// compact form slurmrestd sends.
func syntheticListing(tb testing.TB, dir string, n int) []byte {
	_, body := loadReply(tb, dir, "job_failed")
	var env map[string]json.RawMessage
	require.NoError(tb, json.Unmarshal(body, &env))
	var jobs []json.RawMessage
	require.NoError(tb, json.Unmarshal(env["jobs"], &jobs))
	var job bytes.Buffer
	require.NoError(tb, json.Compact(&job, jobs[0]))
	var out bytes.Buffer
	out.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			out.WriteByte(',')
		}
		out.Write(benchJobIDRE.ReplaceAll(job.Bytes(), []byte(`"job_id":`+strconv.Itoa(1000+i))))
	}
	out.WriteByte(']')
	env["jobs"] = out.Bytes()
	b, err := json.Marshal(env)
	require.NoError(tb, err)
	return b
}

// BenchmarkListJobs: one ListJobs of 10,000 jobs per op, per API version (HTTP in memory: the
// figures are reading, decoding and converting into the model).
func BenchmarkListJobs(b *testing.B) {
	for _, rc := range recorded {
		b.Run(rc.release+"-"+rc.version, func(b *testing.B) {
			body := syntheticListing(b, rc.release+"-"+rc.version, 10000)
			c, err := slurmrest.New(slurmrest.Config{
				BaseURL:    "http://slurmrestd.invalid",
				Version:    rc.version,
				HTTPClient: &http.Client{Transport: memTransport{body}},
			})
			require.NoError(b, err)
			ctx := context.Background()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				l, err := c.ListJobs(ctx, time.Time{})
				if err != nil || len(l.Jobs) != 10000 {
					b.Fatalf("ListJobs: %v, %d jobs", err, len(l.Jobs))
				}
			}
		})
	}
}
