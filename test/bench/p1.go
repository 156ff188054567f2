package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// P1Result is the prolog hook's wall time with the session already ready.
type P1Result struct {
	Exec       Stats // the real binary, fork/exec to exit (what slurmctld waits for)
	HTTPWarm   Stats // the same call in process, on a kept-alive connection
	HTTPCold   Stats // the same call in process, a new TCP connection each time (as the binary makes)
	Runs       int
	StateDirFS string
}

// P1 builds cmd/juice-slurm (the binary slurmctld's prolog execs), registers runs runs whose sessions a real
// controller makes ready, then execs `juice-slurm hook prolog` once per run with the environment slurmctld and
// hooks/juice-config.sh give it, and times each to its exit.
func P1(ctx context.Context, repo string, runs int, logf func(string, ...any)) (P1Result, error) {
	res := P1Result{Runs: runs}
	w, err := NewWorld(ctx, WorldConfig{GPUs: runs + 8})
	if err != nil {
		return res, err
	}
	defer w.Close()
	bin := filepath.Join(w.Dir, "juice-slurm")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/juice-slurm")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return res, fmt.Errorf("go build ./cmd/juice-slurm: %v\n%s", err, out)
	}
	secretFile, err := w.SecretFile()
	if err != nil {
		return res, err
	}
	stateDir := filepath.Join(w.Dir, "sessions")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		return res, err
	}
	res.StateDirFS = fsType(stateDir)

	const first = 1000
	watch, err := WatchState(ctx, w.DBURL, string(reconcile.StateReady))
	if err != nil {
		return res, err
	}
	defer watch.Close()
	// Listed RUNNING (else the poller releases them as gone) and registered, as the poller would.
	w.Slurm.SetRunning(first, runs, Request)
	if err := w.EnsureRuns(ctx, first, runs, 4); err != nil {
		return res, err
	}
	rc, err := w.StartController(controller.Config{})
	if err != nil {
		return res, err
	}
	defer rc.Stop()
	if _, err := watch.WaitFor(runs, 60*time.Second); err != nil {
		return res, err
	}
	logf("P1: %d sessions ready; exec'ing the prolog hook %d times", runs, runs)

	base := append(os.Environ(),
		"SLURM_CLUSTER_NAME="+Cluster, "SLURM_JOB_RESTART_COUNT=0", "SLURM_JOB_USER=alice", "SLURM_JOB_PARTITION=debug",
		"SPANK_JUICE_REQUEST="+Request, "JUICE_HOOK_URL="+rc.URL, "JUICE_HOOK_CA="+rc.CA, "JUICE_HOOK_SECRET="+secretFile,
		"JUICE_STATE_DIR="+stateDir)
	var execTimes []time.Duration
	// One unmeasured run first, so the binary is in the page cache as it is on a busy slurmctld host.
	for i := 0; i <= runs; i++ {
		job := first + i%runs
		cmd := exec.CommandContext(ctx, bin, "hook", "prolog")
		cmd.Env = append(base[:len(base):len(base)], "SLURM_JOB_ID="+strconv.Itoa(job))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil {
			return res, fmt.Errorf("prolog of job %d: %v: %s", job, err, stderr.String())
		}
		if _, err := os.Stat(filepath.Join(stateDir, fmt.Sprintf("%d.0.session", job))); err != nil {
			return res, fmt.Errorf("prolog of job %d exited 0 but wrote no session file: %v", job, err)
		}
		if i > 0 {
			execTimes = append(execTimes, d)
		}
	}
	res.Exec = Summarise(execTimes)

	// The same call without the process: what the hook API itself costs.
	call := func(hc *http.Client, job int) (time.Duration, error) {
		body, _ := json.Marshal(hookapi.PrologRequest{Cluster: Cluster, JobID: uint32(job), WaitSeconds: 10})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rc.URL+"/v1/prolog", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+string(w.Secret))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		var rep hookapi.PrologReply
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err := json.Unmarshal(raw, &rep); err != nil || rep.Outcome != hookapi.OutcomeReady {
			return 0, fmt.Errorf("prolog of job %d in process: %q %v", job, raw, err)
		}
		return d, nil
	}
	for _, mode := range []struct {
		out *Stats
		hc  *http.Client
	}{{&res.HTTPWarm, &http.Client{Transport: &http.Transport{TLSClientConfig: rc.TLS}}},
		{&res.HTTPCold, &http.Client{Transport: &http.Transport{TLSClientConfig: rc.TLS, DisableKeepAlives: true}}}} {
		var ds []time.Duration
		for i := 0; i <= runs; i++ {
			d, err := call(mode.hc, first+i%runs)
			if err != nil {
				return res, err
			}
			if i > 0 {
				ds = append(ds, d)
			}
		}
		*mode.out = Summarise(ds)
	}
	return res, nil
}

// fsType names the file system holding dir (the session file is fsync'ed, which costs what the disk costs).
func fsType(dir string) string {
	out, err := exec.Command("stat", "-f", "-c", "%T", dir).Output()
	if err != nil {
		return "?"
	}
	return string(bytes.TrimSpace(out))
}
