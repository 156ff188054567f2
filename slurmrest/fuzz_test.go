package slurmrest_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// FuzzDecodeJobs feeds arbitrary replies to ListJobs and GetJob of each wire adapter: decoding never panics, and a
// reply that decodes gives jobs whose state is one word the model knows or passes on.
func FuzzDecodeJobs(f *testing.F) {
	dirs, _ := filepath.Glob("testdata/replies/*")
	for _, d := range dirs {
		for _, name := range []string{"jobs.json", "job_failed.json", "job_held.json", "job_notfound.json"} {
			raw, err := os.ReadFile(filepath.Join(d, name))
			if err != nil {
				continue
			}
			// A recorded reply ends with its HTTP status on the last line.
			body := string(raw)
			if i := strings.LastIndexByte(strings.TrimRight(body, "\n"), '\n'); i > 0 {
				body = body[:i]
			}
			f.Add([]byte(body), uint8(len(name)))
		}
	}
	f.Add([]byte(`{"jobs":[{"job_id":1,"job_state":["PENDING"]}],"errors":[]}`), uint8(0))
	var mu sync.Mutex
	var reply []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(reply)
	}))
	defer srv.Close()
	clients := map[string]*slurmrest.Client{}
	for _, v := range []string{"v0.0.38", "v0.0.40", "v0.0.42", "v0.0.45"} {
		c, err := slurmrest.New(slurmrest.Config{BaseURL: srv.URL, UserName: "u", TokenSource: slurmrest.StaticToken("t"),
			Version: v, Retry: slurmrest.RetryConfig{MaxAttempts: 1}, RequestTimeout: 2 * time.Second})
		if err != nil {
			f.Fatal(err)
		}
		clients[v] = c
	}
	f.Fuzz(func(t *testing.T, body []byte, pick uint8) {
		mu.Lock()
		reply = body
		mu.Unlock()
		versions := []string{"v0.0.38", "v0.0.40", "v0.0.42", "v0.0.45"}
		c := clients[versions[int(pick)%len(versions)]]
		ctx := context.Background()
		list, err := c.ListJobs(ctx, time.Time{})
		if err == nil {
			for _, j := range list.Jobs {
				if strings.ContainsAny(string(j.State), " \n") {
					t.Fatalf("state %q is not one word", j.State)
				}
			}
		}
		_, _ = c.GetJob(ctx, 1+uint32(pick))
	})
}
