package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/reconcile"
)

// runHook is what slurmctld's PrologSlurmctld and EpilogSlurmctld run (through hooks/juice-prolog.sh and
// hooks/juice-epilog.sh). It only waits: the reconciler does the work. Progress goes to stderr, which lands in
// slurmctld's log. The prolog exits non-zero when the run cannot be served or its wait runs out, so that Slurm
// requeues a batch job (and cancels an interactive one); the epilog always exits 0, since a failing epilog
// helps nobody.
func runHook(ctx context.Context, which string, args []string) error {
	fs := flag.NewFlagSet("juice-slurm hook "+which, flag.ContinueOnError)
	url := fs.String("hook-url", "http://127.0.0.1:7171", "the controller's hook API")
	secretFile := fs.String("hook-secret", "/etc/juice-slurm/hook.secret", "file holding the hook secret")
	stateDir := fs.String("state-dir", "/var/spool/juice-slurm/sessions", "the shared state directory for session files")
	prologWait := fs.Duration("prolog-wait", 240*time.Second, "how long the prolog waits for a session; keep it well below srun's give-up time (450s by default)")
	epilogWait := fs.Duration("epilog-wait", 15*time.Second, "how long the epilog waits for the release")
	trustComment := fs.Bool("trust-comment", false, "also read the request from SLURM_JOB_COMMENT (default: only the SPANK request)")
	logFile := fs.String("hook-log", "", "also append progress to this file (slurmctld 22.05 discards the hooks' output)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	h, err := newHookRun(*url, *secretFile, *stateDir, *trustComment)
	if *logFile != "" {
		if f, ferr := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640); ferr == nil {
			defer f.Close()
			h.log = f
		} else {
			fmt.Fprintf(os.Stderr, "juice: hook log %s: %v\n", *logFile, ferr)
		}
	}
	if err != nil {
		h.say("%v", err)
		if which == "epilog" {
			return nil
		}
		return exitCode(1)
	}
	if which == "prolog" {
		return h.prolog(ctx, *prologWait)
	}
	h.epilog(ctx, *epilogWait)
	return nil
}

type hookRun struct {
	url, secret, stateDir string
	run                   reconcile.RunID
	request, user, part   string
	client                *http.Client
	log                   io.Writer // the hook log, or nil
}

func newHookRun(url, secretFile, stateDir string, trustComment bool) (*hookRun, error) {
	h := &hookRun{url: strings.TrimRight(url, "/"), stateDir: stateDir, client: &http.Client{}}
	job, err := strconv.ParseUint(os.Getenv("SLURM_JOB_ID"), 10, 32)
	if err != nil {
		return h, fmt.Errorf("SLURM_JOB_ID %q is not a job id: not run by slurmctld?", os.Getenv("SLURM_JOB_ID"))
	}
	run := 0
	if s := os.Getenv("SLURM_JOB_RESTART_COUNT"); s != "" {
		if run, err = strconv.Atoi(s); err != nil {
			return h, fmt.Errorf("SLURM_JOB_RESTART_COUNT %q is not a number", s)
		}
	}
	h.run = reconcile.RunID{Cluster: os.Getenv("SLURM_CLUSTER_NAME"), JobID: uint32(job), Run: run}
	h.user, h.part = os.Getenv("SLURM_JOB_USER"), os.Getenv("SLURM_JOB_PARTITION")
	h.request = os.Getenv("SPANK_JUICE_REQUEST")
	if c := os.Getenv("SLURM_JOB_COMMENT"); h.request == "" && trustComment && strings.HasPrefix(c, reconcile.RequestPrefix) {
		h.request = c
	}
	if h.request == "" {
		return h, nil // not a Juice job; no secret needed
	}
	s, err := controller.LoadSecret(secretFile)
	if err != nil {
		return h, err
	}
	h.secret = string(s)
	return h, nil
}

func (h *hookRun) say(format string, args ...any) {
	line := fmt.Sprintf("juice: job %d run %d: %s\n", h.run.JobID, h.run.Run, fmt.Sprintf(format, args...))
	fmt.Fprint(os.Stderr, line)
	if h.log != nil {
		fmt.Fprint(h.log, time.Now().Format(time.RFC3339)+" "+line)
	}
}

func (h *hookRun) prolog(ctx context.Context, wait time.Duration) error {
	if h.request == "" {
		return nil
	}
	start := time.Now()
	deadline := start.Add(wait)
	h.say("waiting up to %s for the session of %s", wait, h.request)
	for attempt := 0; ; attempt++ {
		left := time.Until(deadline)
		if left <= 0 {
			h.say("no session within %s; failing the prolog so that Slurm requeues the job", wait)
			return exitCode(1)
		}
		var rep controller.PrologReply
		err := h.call(ctx, "/v1/prolog", controller.PrologRequest{Cluster: h.run.Cluster, JobID: h.run.JobID, Run: h.run.Run,
			Request: h.request, User: h.user, Partition: h.part, WaitSeconds: min(left, 10*time.Second).Seconds()}, &rep, left)
		if err != nil {
			if ctx.Err() != nil {
				return exitCode(1)
			}
			h.say("hook API: %v (retrying, %s of %s)", err, time.Since(start).Round(time.Second), wait)
			sleep(ctx, min(controller.Backoff(200*time.Millisecond, 3*time.Second, attempt), time.Until(deadline)))
			continue
		}
		switch rep.Outcome {
		case controller.OutcomeReady:
			if err := h.writeSession(rep.File, rep.Session); err != nil {
				h.say("cannot write the session file: %v", err)
				return exitCode(1)
			}
			h.say("session ready after %s: %s", time.Since(start).Round(time.Millisecond), rep.Reason)
			return nil
		case controller.OutcomeFailed:
			h.say("cannot be served: %s", rep.Reason)
			return exitCode(1)
		case controller.OutcomeNone:
			return nil
		default:
			h.say("still waiting (%s: %s), %s of %s", rep.State, rep.Reason, time.Since(start).Round(time.Second), wait)
		}
	}
}

func (h *hookRun) epilog(ctx context.Context, wait time.Duration) {
	h.removeSession()
	if h.request == "" {
		return
	}
	var rep controller.EpilogReply
	err := h.call(ctx, "/v1/epilog", controller.EpilogRequest{Cluster: h.run.Cluster, JobID: h.run.JobID, Run: h.run.Run,
		ExitCode: os.Getenv("SLURM_JOB_EXIT_CODE2"), WaitSeconds: wait.Seconds()}, &rep, wait+5*time.Second)
	switch {
	case err != nil:
		h.say("hook API: %v; the reconciler releases the session when it sees the job end", err)
	case rep.Outcome == controller.OutcomeReleased:
		h.say("session released (%s)", rep.Reason)
	case rep.Outcome == controller.OutcomeNone:
	default:
		h.say("release under way (%s: %s)", rep.State, rep.Reason)
	}
}

// writeSession writes the sealed file under a temporary name and renames it, so the compute node never reads
// half a file. Mode 0600: only SlurmUser (who writes it) and root (slurmstepd) read it.
func (h *hookRun) writeSession(name string, data []byte) error {
	if name == "" || name != filepath.Base(name) || len(data) == 0 {
		return fmt.Errorf("the hook API sent a bad session file name %q", name)
	}
	tmp, err := os.CreateTemp(h.stateDir, "."+name+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(h.stateDir, name))
}

func (h *hookRun) removeSession() {
	p := filepath.Join(h.stateDir, reconcile.SessionFileName(h.run))
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		h.say("cannot remove %s: %v", p, err)
	}
}

func (h *hookRun) call(ctx context.Context, path string, in, out any, timeout time.Duration) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+h.secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: HTTP %d: %s", path, resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	return json.Unmarshal(raw, out)
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
