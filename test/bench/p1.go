package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// P1Result is the prolog hook's wall time with the session already ready.
type P1Result struct {
	Socket Stats // juice-slurm-hook prolog, fork/exec to exit, calling the controller's hook socket (unix:PATH)
	// Ahead is Socket for a run reserved ahead: its job pending when its session became ready, so that its prolog
	// is the first word of its start (recorded before the reply), as with the look-ahead on a real cluster.
	Ahead  Stats
	Exec   Stats // the same with an https: hook-url: juice-slurm-hook execs juice-slurm hook, which calls over TLS
	Script Stats // hooks/juice-prolog.sh execing juice-slurm-hook on the socket: what slurmctld itself waits for
	Old    Stats // juice-slurm hook prolog over TLS: the path before issue 14 (and of a config naming only juice-slurm)
	Empty  Stats // a Go program that does nothing: the floor of any hook written in Go, on this machine now
	// CPU is each exec path's processor time (user + system, the process and the children it waited for, from
	// wait4), keyed as the paths above ("hook", "old", "script", "empty"): unlike the wall time, it does not grow
	// with the other work on the machine.
	CPU        map[string]Stats
	HTTPWarm   Stats // the same call in process, on a kept-alive connection
	HTTPCold   Stats // the same call in process, a new TCP connection each time (as the binary makes)
	Runs       int
	StateDirFS string
}

// P1 builds cmd/juice-slurm-hook (the binary slurmctld's prolog execs) and, to compare, cmd/juice-slurm and a Go
// program that does nothing; registers runs runs whose sessions a real controller makes ready; then, for each
// run, execs each of them (and hooks/juice-prolog.sh) once, in an order that turns from run to run so that a
// burst of load on the machine falls on all of them alike, with the environment slurmctld and
// hooks/juice-config.sh give the hook, and times each to its exit.
func P1(ctx context.Context, repo string, runs int, logf func(string, ...any)) (P1Result, error) {
	res := P1Result{Runs: runs}
	w, err := NewWorld(ctx, WorldConfig{GPUs: 2*runs + 8})
	if err != nil {
		return res, err
	}
	defer w.Close()
	hookBin, oldBin, emptyBin := filepath.Join(w.Dir, "juice-slurm-hook"), filepath.Join(w.Dir, "juice-slurm"), filepath.Join(w.Dir, "empty")
	// Built as make build builds them: the hook statically.
	for bin, pkg := range map[string]string{hookBin: "./cmd/juice-slurm-hook", oldBin: "./cmd/juice-slurm"} {
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
		build.Dir = repo
		if bin == hookBin {
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := build.CombinedOutput(); err != nil {
			return res, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	emptyDir := filepath.Join(w.Dir, "emptysrc")
	if err := os.Mkdir(emptyDir, 0o700); err != nil {
		return res, err
	}
	if err := os.WriteFile(filepath.Join(emptyDir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		return res, err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", emptyBin, "main.go")
	build.Dir, build.Env = emptyDir, append(os.Environ(), "GO111MODULE=off", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return res, fmt.Errorf("go build of an empty program: %v\n%s", err, out)
	}
	secretFile := w.SecretFile
	stateDir := filepath.Join(w.Dir, "sessions")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		return res, err
	}
	res.StateDirFS = fsType(stateDir)

	const first = 1000
	watch, err := WatchState(ctx, w.DB.Runtime, string(reconcile.StateReady))
	if err != nil {
		return res, err
	}
	defer watch.Close()
	// Listed RUNNING (else the poller releases them as gone) and registered, as the poller would.
	w.Slurm.SetRunning(first, runs, Request)
	if err := w.EnsureRuns(ctx, first, runs, 4); err != nil {
		return res, err
	}
	// The runs reserved ahead, one prolog each (its first marks the job started): listed PENDING, so that the
	// poller keeps them as they are, and registered so.
	aheadFirst := uint32(first + runs + 1000)
	for i := 0; i <= runs; i++ {
		w.Slurm.Set(fakeslurm.JuiceJob(aheadFirst+uint32(i), 0, slurmrest.StatePending, Request))
	}
	if err := w.EnsureRunsOf(ctx, aheadFirst, runs+1, 4, "PENDING"); err != nil {
		return res, err
	}
	// The hook socket in a directory of its own, writable by its owner only, as /run/juice-slurm under the unit.
	sockDir := filepath.Join(w.Dir, "run")
	if err := os.Mkdir(sockDir, 0o755); err != nil {
		return res, err
	}
	socketURL := hookapi.UnixPrefix + filepath.Join(sockDir, "hook.sock")
	rc, err := w.StartController(controller.Config{HookSocket: hookapi.SocketPath(socketURL)})
	if err != nil {
		return res, err
	}
	defer rc.Stop()
	if _, err := watch.WaitFor(2*runs+1, 60*time.Second); err != nil {
		return res, err
	}
	logf("P1: %d sessions ready; exec'ing the prolog hook %d times on each path", runs, runs)

	// hooks/juice-config.sh as an installation on the controller's host has it, naming this world's controller (its
	// hook socket) and files, the hook log too.
	configSh, hookLog := filepath.Join(w.Dir, "juice-config.sh"), filepath.Join(w.Dir, "hooks.log")
	if err := os.WriteFile(configSh, []byte(fmt.Sprintf(`JUICE_HOOK_BIN=%s
JUICE_SLURM_BIN=%s
JUICE_HOOK_URL=%s
JUICE_HOOK_CA=%s
JUICE_HOOK_SECRET=%s
JUICE_STATE_DIR=%s
JUICE_PROLOG_WAIT=240s
JUICE_HOOK_LOG=%s
JUICE_EPILOG_WAIT=15s
export JUICE_HOOK_URL JUICE_HOOK_CA JUICE_HOOK_LOG JUICE_HOOK_SECRET JUICE_STATE_DIR JUICE_PROLOG_WAIT JUICE_EPILOG_WAIT
`, hookBin, oldBin, socketURL, rc.CA, secretFile, stateDir, hookLog)), 0o644); err != nil {
		return res, err
	}
	// slurmctld's environment (no PATH: it gives none), and the settings the config would export.
	slurmctld := []string{"SLURM_CLUSTER_NAME=" + Cluster, "SLURM_JOB_RESTART_COUNT=0", "SLURM_JOB_USER=alice",
		"SLURM_JOB_PARTITION=debug", "SPANK_JUICE_REQUEST=" + Request, "JUICE_CONFIG="}
	direct := append(slurmctld[:len(slurmctld):len(slurmctld)], "JUICE_HOOK_URL="+rc.URL, "JUICE_HOOK_CA="+rc.CA,
		"JUICE_HOOK_SECRET="+secretFile, "JUICE_STATE_DIR="+stateDir, "JUICE_HOOK_LOG="+hookLog)
	paths := []struct {
		name  string
		out   *Stats
		argv  []string
		env   []string
		check bool   // a prolog: it must have written the session file
		ahead uint32 // the first of its own runs, one call each, when not 0
	}{
		{"hook", &res.Exec, []string{hookBin, "prolog"}, direct, true, 0},
		{"socket", &res.Socket, []string{hookBin, "prolog"}, append(slurmctld[:len(slurmctld):len(slurmctld)], "JUICE_HOOK_URL="+socketURL,
			"JUICE_HOOK_SECRET="+secretFile, "JUICE_STATE_DIR="+stateDir, "JUICE_HOOK_LOG="+hookLog), true, 0},
		{"ahead", &res.Ahead, []string{hookBin, "prolog"}, append(slurmctld[:len(slurmctld):len(slurmctld)], "JUICE_HOOK_URL="+socketURL,
			"JUICE_HOOK_SECRET="+secretFile, "JUICE_STATE_DIR="+stateDir, "JUICE_HOOK_LOG="+hookLog), true, aheadFirst},
		{"old", &res.Old, []string{oldBin, "hook", "prolog"}, direct, true, 0},
		{"script", &res.Script, []string{"/bin/sh", filepath.Join(repo, "hooks", "juice-prolog.sh")}, append(slurmctld[:len(slurmctld):len(slurmctld)], "JUICE_CONFIG_SH="+configSh), true, 0},
		{"empty", &res.Empty, []string{emptyBin}, nil, false, 0},
	}
	times, cpu := make([][]time.Duration, len(paths)), make([][]time.Duration, len(paths))
	// One unmeasured round first, so that every binary is in the page cache as it is on a busy slurmctld host.
	for i := 0; i <= runs; i++ {
		for k := range paths {
			p := paths[(i+k)%len(paths)]
			job := first + i%runs
			if p.ahead != 0 {
				job = int(p.ahead) + i
			}
			session := filepath.Join(stateDir, fmt.Sprintf("%d.0.session", job))
			if err := os.Remove(session); err != nil && !errors.Is(err, os.ErrNotExist) {
				return res, err
			}
			cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
			cmd.Env = append(p.env[:len(p.env):len(p.env)], "SLURM_JOB_ID="+strconv.Itoa(job))
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			err := cmd.Run()
			d := time.Since(start)
			if err != nil {
				return res, fmt.Errorf("%s for job %d: %v: %s", p.argv, job, err, stderr.String())
			}
			if _, err := os.Stat(session); p.check && err != nil {
				return res, fmt.Errorf("%s for job %d exited 0 but wrote no session file: %v", p.argv, job, err)
			}
			if i > 0 {
				n := (i + k) % len(paths)
				times[n] = append(times[n], d)
				cpu[n] = append(cpu[n], cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			}
		}
	}
	res.CPU = map[string]Stats{}
	for k, p := range paths {
		*p.out = Summarise(times[k])
		res.CPU[p.name] = Summarise(cpu[k])
	}

	// The same call without the process: what the hook API itself costs.
	call := func(hc *http.Client, job int) (time.Duration, error) {
		body, _ := json.Marshal(hookapi.PrologRequest{Cluster: Cluster, JobID: uint32(job), WaitSeconds: 10})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, rc.URL+"/v1/prolog", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+string(world.Secret))
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

// fsType names the file system holding dir (where the hook writes and renames the session file).
func fsType(dir string) string {
	out, err := exec.Command("stat", "-f", "-c", "%T", dir).Output()
	if err != nil {
		return "?"
	}
	return string(bytes.TrimSpace(out))
}
