// Command chaos runs many Juice jobs through the real test bed while it breaks things: the controller is killed
// with -9 again and again, PostgreSQL is restarted, the simulator answers with errors and latency, and
// slurmrestd is stopped for a while; on a bed with accounting slurmdbd is restarted, then (once slurmrestd is back)
// stopped for a minute while a pool's license must change (slurmdbd.go). At the end it prints the figures and fails unless no session leaked, no run
// ever had two sessions, and every job completed (a requeued one with the reason of each earlier run recorded).
//
//	go run ./test/chaos -jobs 500 -kills 20 -rest-outage 60s     (make chaos)
//	go run ./test/chaos -jobs 60 -kills 4 -rest-outage 15s       (make chaos-short, in CI)
//
// It needs the test bed up and wired (make testbed-wire, or test/chroot/slurm-chroot.sh wire SUITE for Slurm 24.11
// and 26.05 with JUICE_TESTBED_ENV naming its env file) and the binaries built; it uses the test bed's simulator
// and hook ports (7070 and 7171 on the host's), so it never runs beside the e2e suite on the same test bed.
//
// With -juice legacy the Juice side is the legacy open-source controller that test/juicelegacy/legacy.sh up runs
// (make test-juice-legacy): it has no fault injection, it shares the test bed's PostgreSQL (so PostgreSQL is not
// restarted), and its sessions are counted from its own database, each by the key its version field carries.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
	"github.com/juice-slurm/juice-slurm/test/world"
)

// simAdmin reads the simulator's sessions.
var simAdmin world.SimAdmin

// simAddr and hookAddr are the test bed's (testbed.Env.SimAddr, HookAddr).
var simAddr, hookAddr string

var restartPG bool

// dbdOutage is how long slurmdbd is stopped (-dbd-outage; slurmdbd.go).
var dbdOutage time.Duration

// pgFailover: the database is on test/pgpair.sh's primary and standby (multi-host URL, target_session_attrs
// read-write), and instead of a restart of PostgreSQL the standby is promoted and the primary stopped.
var pgFailover bool

// handoff: session hand-off on in pool test, each job's session checked to be its own run's (-handoff).
var handoff bool

// legacy is the legacy controller's env file when it is the Juice side (-juice legacy).
var legacy *testbed.Env

func legacyEnvFile() string {
	if p := os.Getenv("JUICE_LEGACY_ENV"); p != "" {
		return p
	}
	return "/var/tmp/juice-testbed/legacy/env"
}

type chaos struct {
	env        testbed.Env
	repo, dir  string
	tokenFile  string // the simulator's token
	dbURL      string
	controller *exec.Cmd
	slurm      *slurmrest.Client
	store      *store.Store
	kills      int
	restarts   []time.Duration // controller down time per kill
	failedOver time.Duration   // with -pg-failover: from the primary's end to the controller's /readyz answering again
	sim        *exec.Cmd
	dbd        dbdChaos                  // slurmdbd's part (slurmdbd.go)
	events     []string                  // Slurm's own failures made (slurm.go)
	backupTook time.Duration             // from the primary slurmctld's stop to the backup serving (-slurm-failover)
	cancelled  map[uint32]bool           // jobs the soak cancelled on purpose (soak.go)
	ended      map[uint32]*slurmrest.Job // jobs the soak saw finished while it ran (soak.go)
	errRate    float64
	latency    time.Duration
	policy     string // the controller's site policy (handoffFiles)
	outDir     string // with -handoff: where the jobs write the session they ran on
}

func main() {
	jobs := flag.Int("jobs", 60, "jobs to submit")
	kills := flag.Int("kills", 4, "times the controller is killed with -9")
	outage := flag.Duration("rest-outage", 15*time.Second, "how long slurmrestd is stopped")
	errRate := flag.Float64("error-rate", 0.2, "fraction of simulator requests answered 500")
	latency := flag.Duration("latency", 200*time.Millisecond, "latency added to every simulator request")
	timeout := flag.Duration("timeout", 25*time.Minute, "give up after this long")
	juiceSide := flag.String("juice", "sim", "the Juice side: sim (juice-sim, with faults) or legacy (the legacy controller, up already)")
	out := flag.String("out", "", "also write the figures to this file")
	// PostgreSQL is the host test bed's, shared by every release's run and guarded by the host's lock: the runs on
	// the chroot test beds leave it alone (the controller's reconnect is the same code whatever the release).
	flag.BoolVar(&restartPG, "restart-postgres", true, "restart PostgreSQL after the second kill")
	flag.DurationVar(&soakFor, "soak", 0, "soak instead: one controller process under mixed load for this long (soak.go); -jobs, -kills and -rest-outage are not used")
	flag.DurationVar(&soakSample, "sample", 30*time.Second, "with -soak: how often the controller is sampled")
	flag.IntVar(&soakQueue, "soak-queue", 20, "with -soak: the jobs that may wait or run at once")
	flag.BoolVar(&slurmFailover, "slurm-failover", false, "stop the primary slurmctld after the second kill of the controller (the backup takes over) and start it again after the fourth (slurm.go; test/slurmfailover/failover.sh sets the backup up)")
	flag.BoolVar(&slurmEvents, "slurm-events", false, "also reconfigure slurmctld, restart munged and restart slurmctld during the run (slurm.go)")
	flag.StringVar(&slurmEventsSkip, "slurm-events-skip", "", "with -slurm-events: leave out these events, comma-separated (reconfigure, munged, slurmctld), each said in the report")
	flag.DurationVar(&dbdOutage, "dbd-outage", 60*time.Second, "how long slurmdbd is stopped, after a restart of it early in the run (on a bed with accounting); 0 leaves slurmdbd alone")
	flag.BoolVar(&handoff, "handoff", true, "session hand-off on in pool test (the controller's copy of the bed's policy); every job writes the session it ran on, checked to be its own run's")
	flag.BoolVar(&pgFailover, "pg-failover", false, "run on test/pgpair.sh's primary and standby (up already) and promote the standby after the second kill, instead of restarting PostgreSQL")
	flag.Parse()
	if err := checkSkip(); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	if *juiceSide == "legacy" {
		env, err := testbed.Load(legacyEnvFile())
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: -juice legacy: the legacy controller is not up (make juice-legacy-up): %v\n", err)
			os.Exit(1)
		}
		legacy = &env
		*errRate, *latency = 0, 0
	} else if *juiceSide != "sim" {
		fmt.Fprintf(os.Stderr, "chaos: -juice %q: want sim or legacy\n", *juiceSide)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *jobs, *kills, *outage, *errRate, *latency, *out); err != nil {
		fmt.Fprintln(os.Stderr, "chaos: FAILED:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Printf("[chaos %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, nJobs, nKills int, outage time.Duration, errRate float64, latency time.Duration, out string) error {
	env, err := testbed.Load(testbed.EnvFile())
	if err != nil {
		return fmt.Errorf("the test bed is not up: %w", err)
	}
	repo, err := testbed.Repo()
	if err != nil {
		return err
	}
	c := &chaos{env: env, repo: repo, errRate: errRate, latency: latency, dbd: dbdChaos{outage: dbdOutage}}
	simAddr, hookAddr = env.SimAddr(), env.HookAddr()
	juiceAt := "juice-sim " + simAddr
	if legacy != nil {
		juiceAt = "the legacy controller " + legacy.Get("JUICE_LEGACY_URL")
	}
	logf("Slurm %s, slurmrestd %s, %s, hook API %s", env.Release(), env.SlurmrestdURL(), juiceAt, hookAddr)
	// The controller runs as the runtime role on a database the owner role migrated with juice-slurm migrate (on
	// the PostgreSQL pair, with -pg-failover, as the pair's only role).
	cfg := world.Config{Cluster: env.Cluster(), Migrator: testbed.Binary(repo)}
	if pgFailover {
		if cfg.DBURL, err = pairDatabase(ctx, repo); err != nil {
			return err
		}
	}
	w, err := world.Build(ctx, cfg)
	if err != nil {
		return err
	}
	defer w.Close()
	c.dir, c.dbURL, c.store, c.tokenFile = w.Dir, w.DB.Runtime, w.Store, w.TokenFile
	if c.policy, c.outDir, err = c.handoffFiles(); err != nil {
		return err
	}
	if c.outDir != "" {
		defer os.RemoveAll(c.outDir)
	}
	simAdmin = world.SimAdmin{URL: "http://" + simAddr, Token: world.Token}
	if c.slurm, err = slurmrest.New(slurmrest.Config{BaseURL: env.SlurmrestdURL(), UserName: env.SlurmUser(),
		TokenSource: slurmrest.FileToken(env.TokenFile())}); err != nil {
		return err
	}
	for _, name := range []string{"juice-controller", "juice-sim"} {
		testbed.StopPidFile(filepath.Join(env.RunDir(), name+".pid"))
	}

	for _, addr := range []string{simAddr, hookAddr} {
		if err := testbed.PortFree(addr); err != nil && (legacy == nil || addr == hookAddr) {
			return err
		}
	}
	juiceArgs, err := c.startJuice()
	if err != nil {
		return err
	}
	defer c.stopJuice()
	if soakFor > 0 {
		dbdOutage = 0 // the soak watches one process over time: slurmdbd's part is the chaos run's
		c.dbd.outage = 0
	}
	if c.accounting() && dbdOutage > 0 {
		url, token := "http://"+simAddr, c.tokenFile
		if legacy != nil {
			url, token = legacy.Get("JUICE_LEGACY_URL"), legacy.Get("JUICE_LEGACY_TOKEN_FILE")
		}
		if err := c.holdForeign(ctx, url, token); err != nil {
			return err
		}
		defer func() { _ = c.cancelForeign(context.Background()) }()
	}
	ctlLog := filepath.Join(env.LogDir(), "chaos-controller.log")
	_ = os.Remove(ctlLog)
	startCtl := func() error {
		cmd := exec.Command(filepath.Join(c.repo, "bin/juice-slurm"), append([]string{"controller", "--config=",
			"--cluster", env.Cluster(), "--database-url", c.dbURL,
			"--slurmrestd-url", env.SlurmrestdURL(), "--slurm-user", env.SlurmUser(), "--slurm-token-file", env.TokenFile(),
			"--cluster-key", env.ClusterKey(), "--hook-secret", env.HookSecret(), "--policy", c.policy,
			"--hook-cert", env.HookCert(), "--hook-key", env.HookKey(), "--scontrol", env.Scontrol(),
			"--state-dir", env.Get("JUICE_TESTBED_SESSIONS_DIR"),
			"--hook-listen", hookAddr, "--poll-interval", "500ms", "--session-poll", "200ms", "--lease-ttl", "3s",
			"--sweep-interval", "15s", "--log-format", "json"}, append(append(juiceArgs, c.licenseArgs()...), env.HookSocketArgs()...)...)...)
		if err := testbed.StartLogged(cmd, ctlLog); err != nil {
			return err
		}
		c.controller = cmd
		return nil
	}
	if err := startCtl(); err != nil {
		return err
	}
	defer func() { testbed.StopProcess(c.controller) }()
	if err := c.env.WaitHook(hookAddr, "/readyz", 60*time.Second); err != nil {
		return err
	}
	if c.dbd.juice != nil {
		c.dbd.start = c.dbd.full - c.dbd.held
		if err := c.waitLicense(ctx, c.dbd.start, 90*time.Second, "the controller's first license sync"); err != nil {
			return err
		}
	}
	if soakFor > 0 {
		return c.soak(ctx, out)
	}
	return c.disturb(ctx, startCtl, nJobs, nKills, outage, errRate, latency, out)
}

// startJuice starts the simulator with its faults (or, with -juice legacy, checks the legacy controller answers)
// and returns the controller's flags that point at it.
func (c *chaos) startJuice() ([]string, error) {
	if legacy != nil {
		if err := testbed.WaitHTTP(legacy.Get("JUICE_LEGACY_URL")+"/v1/status", 10*time.Second); err != nil {
			return nil, fmt.Errorf("the legacy controller: %w", err)
		}
		// Its agents read their answers with one 4 KB read, and every session on an agent (each listing all its
		// GPUs) makes the answer longer: fewer sessions reserved ahead keeps an agent under it (README).
		return []string{"--juice-url", legacy.Get("JUICE_LEGACY_URL"), "--juice-token-file", legacy.Get("JUICE_LEGACY_TOKEN_FILE"),
			"--juice-pools", legacy.Get("JUICE_LEGACY_POOLS"), "--lookahead-per-pool", "2"}, nil
	}
	// The simulator, with its faults from the start.
	simCfg := filepath.Join(c.dir, "sim.json")
	if err := os.WriteFile(simCfg, []byte(`{"tick": "100ms", "activateDelay": "100ms", "cancelDelay": "100ms",
		"pools": [{"id": "test", "agents": [{"count": 4, "gpus": 8, "vram": "80GiB"}]}]}`), 0o644); err != nil {
		return nil, err
	}
	sim := exec.Command(filepath.Join(c.repo, "bin/juice-sim"), "--listen", simAddr, "--token-file", c.tokenFile,
		"--config", simCfg, "--fault-error-rate", fmt.Sprint(c.errRate), "--fault-latency", c.latency.String(), "--log-format", "json")
	if err := testbed.StartLogged(sim, filepath.Join(c.dir, "sim.log")); err != nil {
		return nil, err
	}
	c.sim = sim
	if err := testbed.WaitHTTP("http://"+simAddr+"/healthz", 20*time.Second); err != nil {
		return nil, err
	}
	return []string{"--juice-url", "http://" + simAddr, "--juice-token-file", c.tokenFile}, nil
}

func (c *chaos) stopJuice() {
	if c.sim != nil {
		testbed.StopProcess(c.sim)
	}
}

// disturb submits the jobs, breaks things while they run, waits for the end and verifies.
func (c *chaos) disturb(ctx context.Context, startCtl func() error, nJobs, nKills int, outage time.Duration, errRate float64,
	latency time.Duration, out string) error {
	env := c.env
	start := time.Now()
	logf("submitting %d jobs", nJobs)
	var ids []uint32
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := 0; i < nJobs; i++ {
		args := []string{"--parsable", "--requeue", "-o", c.jobOut("out"), "-e", c.jobOut("err"), "--job-name", fmt.Sprintf("chaos-%d", i), "--juice-pool=test"}
		switch rng.IntN(3) {
		case 0:
			args = append(args, "--juice-gpu-count=2")
		case 1:
			args = append(args, "--juice-vram=1.5")
		}
		// The session the job's tasks got: its own run's (checkOwnSessions).
		args = append(args, "--wrap", fmt.Sprintf("test -n \"$JUICE_SESSION_ID\" || exit 42; echo \"$JUICE_SESSION_ID\"; sleep %d", 1+rng.IntN(3)))
		id, err := sbatch(ctx, env, args)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	logf("submitted jobs %d..%d in %s", ids[0], ids[len(ids)-1], time.Since(start).Round(time.Millisecond))

	// The disturbances, spread over the run: kills every few seconds, PostgreSQL restarted after the second
	// kill, slurmrestd stopped after the third.
	// PostgreSQL is always the host test bed's; slurmrestd is the test bed's own, brought back by its "up".
	restRun := filepath.Join(env.RunDir(), "slurmrestd.pid")
	restUp := func() error { return c.bedUp("slurmrestd again") }
	pgRestarted, restStopped := false, false
	var restBack time.Time
	for k := 0; k < nKills && ctx.Err() == nil; k++ {
		time.Sleep(time.Duration(3000+rng.IntN(4000)) * time.Millisecond)
		logf("kill -9 the controller (%d of %d)", k+1, nKills)
		_ = c.controller.Process.Signal(syscall.SIGKILL)
		_, _ = c.controller.Process.Wait()
		down := time.Now()
		time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
		if err := startCtl(); err != nil {
			return err
		}
		c.kills++
		if err := c.env.WaitHook(hookAddr, "/healthz", 30*time.Second); err != nil {
			return err
		}
		c.restarts = append(c.restarts, time.Since(down))
		if k == 1 && pgFailover && !pgRestarted {
			logf("promoting the PostgreSQL standby; the primary stops at once")
			failed := time.Now()
			if out, err := exec.Command("bash", filepath.Join(c.repo, "test/pgpair.sh"), "promote").CombinedOutput(); err != nil {
				return fmt.Errorf("promote the standby: %v: %s", err, out)
			}
			pgRestarted = true
			if err := c.env.WaitHook(hookAddr, "/readyz", 60*time.Second); err != nil {
				return fmt.Errorf("the controller after the failover: %w", err)
			}
			c.failedOver = time.Since(failed)
			logf("the controller is ready %s after the primary began to stop", c.failedOver.Round(time.Millisecond))
		}
		if k == 1 && restartPG && !pgFailover && !pgRestarted && legacy == nil { // the legacy controller shares the server: not with it
			logf("restarting PostgreSQL")
			if err := c.restartPostgres(); err != nil {
				return err
			}
			pgRestarted = true
		}
		if k == 2 && !restStopped {
			logf("stopping slurmrestd for %s", outage)
			testbed.StopPidFile(restRun)
			restStopped = true
			restBack = time.Now().Add(outage)
		}
		if k == 0 {
			if err := c.restartSlurmdbd(); err != nil {
				return err
			}
		}
		if err := c.slurmEvent(ctx, k, nKills); err != nil {
			return err
		}
		if restStopped && !restBack.IsZero() && time.Now().After(restBack) {
			if err := restUp(); err != nil {
				return err
			}
			restBack = time.Time{}
			if err := c.stopSlurmdbd(ctx); err != nil {
				return err
			}
		}
	}
	if !restBack.IsZero() {
		time.Sleep(time.Until(restBack))
		if err := restUp(); err != nil {
			return err
		}
	}
	// slurmdbd's outage, after slurmrestd's (whose return would start it again), while the jobs still run.
	if err := c.stopSlurmdbd(ctx); err != nil {
		return err
	}
	if err := c.slurmdbdBack(); err != nil {
		return err
	}

	states, err := c.waitJobs(ctx, ids, start)
	if err != nil {
		return err
	}
	return c.verify(ctx, ids, states, start, pgRestarted, restStopped, outage, errRate, latency, out)
}

// waitJobs waits until every job has finished, then until no reservation is open, and returns what Slurm last
// said of each job.
func (c *chaos) waitJobs(ctx context.Context, ids []uint32, start time.Time) (map[uint32]*slurmrest.Job, error) {
	logf("waiting for every job to finish")
	states := map[uint32]*slurmrest.Job{}
	for id, j := range c.ended {
		states[id] = j
	}
	for lastLog := time.Now(); ; {
		done := 0
		for _, id := range ids {
			if j, ok := states[id]; ok && j.State.IsFinished() {
				done++
				continue
			}
			j, err := c.slurm.GetJob(ctx, id)
			if errors.Is(err, slurmrest.ErrNotFound) {
				// Purged after MinJobAge before we saw its end: counted, and reported as not seen completed.
				states[id] = &slurmrest.Job{ID: id, State: "PURGED_UNSEEN"}
				done++
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("jobs not finished in time: %d of %d done", done, len(ids))
				}
				if time.Since(lastLog) > 10*time.Second {
					logf("job %d: %v", id, err)
				}
				continue
			}
			states[id] = j
			if j.State.IsFinished() {
				done++
			}
		}
		if done == len(ids) {
			break
		}
		if time.Since(lastLog) > 10*time.Second {
			logf("%d of %d jobs finished", done, len(ids))
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("jobs not finished in time: %d of %d done", done, len(ids))
		case <-time.After(time.Second):
		}
	}
	logf("all jobs finished after %s; waiting for every reservation to settle", time.Since(start).Round(time.Second))
	for settle := time.Now(); ; {
		open, err := c.store.Open(ctx)
		if err == nil && len(open) == 0 {
			break
		}
		if time.Since(settle) > 2*time.Minute {
			return nil, fmt.Errorf("%d reservations still open 2 minutes after the last job", len(open))
		}
		time.Sleep(time.Second)
	}
	return states, nil
}

func (c *chaos) verify(ctx context.Context, ids []uint32, states map[uint32]*slurmrest.Job, start time.Time,
	pgRestarted, restStopped bool, outage time.Duration, errRate float64, latency time.Duration, out string) error {
	sessions, err := simSessions()
	if legacy != nil {
		sessions, err = legacyDBSessions(ctx)
	}
	if err != nil {
		return err
	}
	sessionsByKey := map[string][]juiceapi.Session{}
	for _, s := range sessions {
		sessionsByKey[s.IdempotencyKey] = append(sessionsByKey[s.IdempotencyKey], s)
	}
	var problems []string
	leaked, twoSessions, requeued, runs, failedRuns := 0, 0, 0, 0, 0
	var notCompleted []string
	for _, s := range sessions {
		if !s.Ended() {
			leaked++
			problems = append(problems, fmt.Sprintf("session %s (%s, key %s) leaked", s.ID, s.State, s.IdempotencyKey))
		}
	}
	for _, id := range ids {
		j := states[id]
		if j.State != slurmrest.StateCompleted && !(c.cancelled[id] && j.State == slurmrest.StateCancelled) {
			notCompleted = append(notCompleted, fmt.Sprintf("%d:%s", id, j.State))
		}
		if j.Run > 0 {
			requeued++
		}
		rs, err := c.store.ForJob(ctx, id)
		if err != nil {
			return err
		}
		perRun := map[int][]reconcile.Reservation{}
		for _, r := range rs {
			runs++
			perRun[r.Run.Run] = append(perRun[r.Run.Run], r)
			if r.Status.State == reconcile.StateFailed {
				failedRuns++
			}
			if r.Status.Reason == "" {
				problems = append(problems, fmt.Sprintf("job %d run %d: no reason recorded", id, r.Run.Run))
			}
		}
		for run, list := range perRun {
			if n := atOnce(list, sessionsByKey); n > 1 {
				twoSessions++
				problems = append(problems, fmt.Sprintf("job %d run %d had %d sessions at once", id, run, n))
			}
		}
	}
	problems = append(problems, c.checkLicense(ctx)...)
	foreign, handed, err := c.checkOwnSessions(ctx, ids, states)
	if err != nil {
		return err
	}
	problems = append(problems, foreign...)
	if c.controller != nil && !running(c.controller.Process.Pid) {
		problems = append(problems, "the controller exited on its own after its last restart (see chaos-controller.log's end)")
	}
	if len(notCompleted) > 0 {
		problems = append(problems, fmt.Sprintf("%d jobs did not complete: %s", len(notCompleted), strings.Join(notCompleted, " ")))
	}
	var maxDown time.Duration
	for _, d := range c.restarts {
		maxDown = max(maxDown, d)
	}
	report := fmt.Sprintf(`## Chaos run (%s)

| figure | value |
|---|---|
| jobs | %d (completed: %d, requeued at least once: %d) |
| reservations (runs) | %d (failed: %d) |
| sessions at the Juice side | %d (leaked: %d) |
| runs with two sessions | %d |
| sessions handed from a run to the next (hand-off %s) | %d; jobs that ran on another run's session: %d |
| controller kill -9 | %d (longest restart to healthy: %s) |
| %s |
| slurmrestd stopped | %v (%s) |
%s%s| %s |
| wall time | %s |
`, time.Now().Format(time.DateTime), len(ids), len(ids)-len(notCompleted), requeued, runs, failedRuns, len(sessions), leaked,
		twoSessions, onOff(handoff), handed, len(foreign), c.kills, maxDown.Round(time.Millisecond), pgLine(pgRestarted, c.failedOver), restStopped, outage, c.dbdLines(), c.eventsLine(), juiceSide(errRate, latency),
		time.Since(start).Round(time.Second))
	fmt.Println()
	fmt.Print(report)
	if out != "" {
		if err := os.WriteFile(out, []byte(report), 0o644); err != nil {
			return err
		}
	}
	if legacy != nil {
		problems = append(problems, legacyAlive()...)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%d problems:\n  %s", len(problems), strings.Join(problems, "\n  "))
	}
	fmt.Println("\nchaos: PASS: 0 leaked sessions, 0 runs with two sessions, every job completed")
	return nil
}

// pgLine is the report's PostgreSQL row.
func pgLine(done bool, failedOver time.Duration) string {
	if pgFailover {
		return fmt.Sprintf("PostgreSQL standby promoted, primary stopped | %v (controller ready again after %s)", done, failedOver.Round(time.Millisecond))
	}
	return fmt.Sprintf("PostgreSQL restarted | %v", done)
}

// pairDatabase makes a fresh database on test/pgpair.sh's primary, migrates it with this tree's binary, and
// returns its multi-host URL.
func pairDatabase(ctx context.Context, repo string) (string, error) {
	dir := os.Getenv("JUICE_PGPAIR_DIR")
	if dir == "" {
		dir = "/var/tmp/juice-testbed/pgpair"
	}
	pair, err := testbed.Load(filepath.Join(dir, "env"))
	if err != nil {
		return "", fmt.Errorf("-pg-failover: the PostgreSQL pair is not up (bash test/pgpair.sh up): %w", err)
	}
	base := pair.Get("JUICE_PGPAIR_URL")
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("-pg-failover: %w", err)
	}
	defer conn.Close(ctx)
	db := fmt.Sprintf("juice_chaos_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", fmt.Errorf("-pg-failover: %w", err)
	}
	url := strings.Replace(base, "/postgres?", "/"+db+"?", 1)
	if out, err := exec.CommandContext(ctx, filepath.Join(repo, "bin/juice-slurm"), "migrate", "--config=", "--database-url", url).CombinedOutput(); err != nil {
		return "", fmt.Errorf("-pg-failover: juice-slurm migrate: %v: %s", err, out)
	}
	logf("database %s on the PostgreSQL pair: %s", db, url)
	return url, nil
}

func sbatch(ctx context.Context, env testbed.Env, args []string) (uint32, error) {
	cmd := env.Command(ctx, "sbatch", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("sbatch %v: %v: %s", args, err, out)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(strings.Split(string(out), ";")[0]), 10, 32)
	return uint32(id), err
}

func simSessions() ([]juiceapi.Session, error) {
	return simAdmin.Sessions(context.Background())
}

func juiceSide(errRate float64, latency time.Duration) string {
	if legacy != nil {
		return "Juice side | the legacy controller (no fault injection; PostgreSQL shared, so not restarted)"
	}
	return fmt.Sprintf("simulator faults | %.0f%% errors, %s added latency", errRate*100, latency)
}

// legacyDBSessions reads every session the legacy controller ever stored, from its own database (it has no
// session listing, and its agents forget closed sessions), each with the key its version field carries.
func legacyDBSessions(ctx context.Context) ([]juiceapi.Session, error) {
	conn, err := os.ReadFile(filepath.Join(legacy.Get("JUICE_LEGACY_DIR"), "run", "psql.conn"))
	if err != nil {
		return nil, fmt.Errorf("the legacy controller's database: %w", err)
	}
	pool, err := pgxpool.New(ctx, strings.TrimSpace(string(conn)))
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT uuid::text, state, version FROM sessions WHERE deleted_at IS NULL`)
	if err != nil {
		return nil, fmt.Errorf("the legacy controller's sessions: %w", err)
	}
	defer rows.Close()
	names := []string{"unknown", juiceapi.StateQueued, juiceapi.StateAssigned, juiceapi.StateActive, juiceapi.StateCanceling, juiceapi.StateClosed}
	var out []juiceapi.Session
	for rows.Next() {
		var s juiceapi.Session
		var state int
		if err := rows.Scan(&s.ID, &state, &s.Version); err != nil {
			return nil, err
		}
		if state >= 0 && state < len(names) {
			s.State = names[state]
		}
		s.IdempotencyKey = s.Key()
		out = append(out, s)
	}
	return out, rows.Err()
}

// legacyAlive reports a legacy controller that no longer answers, or emulated agents that exited (as a real
// agent exits on an answer it cannot read or a cancel of a session it does not hold).
func legacyAlive() []string {
	var problems []string
	if err := testbed.WaitHTTP(legacy.Get("JUICE_LEGACY_URL")+"/v1/status", 5*time.Second); err != nil {
		problems = append(problems, fmt.Sprintf("the legacy controller no longer answers: %v", err))
	}
	resp, err := http.Get(legacy.Get("JUICE_LEGACY_AGENTS_URL") + "/agents")
	if err != nil {
		return append(problems, fmt.Sprintf("agent emulator: %v", err))
	}
	defer resp.Body.Close()
	var agents []struct{ Name, State, Reason string }
	if err := json.NewDecoder(resp.Body).Decode(&agents); err != nil {
		return append(problems, fmt.Sprintf("agent emulator: %v", err))
	}
	for _, a := range agents {
		if a.State != "running" {
			problems = append(problems, fmt.Sprintf("emulated agent %s is %s: %s", a.Name, a.State, a.Reason))
		}
	}
	return problems
}

// atOnce is the most sessions one run held at once: a reservation's own sessions that held GPUs (two under one key are a booking
// doubled by a lost answer), and those of reservations of the run that overlapped. A reservation let go without
// ending its run (a held job, or one that yielded its pool to a started job) is released before the run's next
// one is made: their sessions follow each other and are not counted together.
func atOnce(list []reconcile.Reservation, sessionsByKey map[string][]juiceapi.Session) int {
	most := 0
	held := func(r reconcile.Reservation) int {
		n := taken(r, sessionsByKey)
		for _, s := range sessionsByKey[r.ID.String()] {
			if heldGPUs(s) {
				n++
			}
		}
		return n
	}
	for i, a := range list {
		n := held(a)
		for j, b := range list {
			if i == j || held(b) == 0 {
				continue
			}
			// b overlaps a unless one of them ended (its last status write, final) before the other was made.
			aEnded := a.Status.State.Final() && !a.Status.UpdatedAt.After(b.CreatedAt)
			bEnded := b.Status.State.Final() && !b.Status.UpdatedAt.After(a.CreatedAt)
			if !aEnded && !bEnded {
				n += held(b)
			}
		}
		most = max(most, n)
	}
	return most
}

// heldGPUs reports whether a session ever held GPUs: it is live, or an agent was given it before it ended. A run
// that takes a like run's session while its own waits in the queue has that one cancelled there (hand-off): it
// never held a GPU, and the run held one session.
func heldGPUs(s juiceapi.Session) bool { return !s.Ended() || s.Address != "" }

// taken is 1 when r held a session its key does not name: one handed to it by the run before (hand-off), which
// carries that run's key. A run that took one and asked for one of its own held two.
func taken(r reconcile.Reservation, sessionsByKey map[string][]juiceapi.Session) int {
	if r.Status.SessionID == "" {
		return 0
	}
	for _, s := range sessionsByKey[r.ID.String()] {
		if s.ID == r.Status.SessionID {
			return 0
		}
	}
	return 1
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// handoffFiles writes, with -handoff, the controller's policy (the bed's, with hand-off on in pool test) and makes
// the directory the jobs write their sessions into (in the bed, where its jobs write); without, the bed's policy.
func (c *chaos) handoffFiles() (policy, outDir string, err error) {
	if !handoff {
		return c.env.PolicyFile(), "", nil
	}
	b, err := os.ReadFile(c.env.PolicyFile())
	if err != nil {
		return "", "", fmt.Errorf("the test bed's site policy: %w", err)
	}
	policy = filepath.Join(c.dir, "juice-policy.conf")
	if err := os.WriteFile(policy, append(b, "\n# The chaos run's own: session hand-off in pool test.\npool.test.handoff = on\n"...), 0o644); err != nil {
		return "", "", err
	}
	if outDir, err = os.MkdirTemp(c.env.HostPath(os.TempDir()), "juice-chaos-out-"); err != nil {
		return "", "", err
	}
	return policy, outDir, nil
}

// jobOut is a job's -o (kind "out") or -e ("err"): with -handoff its file in outDir, else nothing. Its standard
// output holds only the session its tasks got (checkOwnSessions); what slurmstepd writes goes to the other file
// (seen on 24.11 with munged restarted under a job: "slurmstepd-...: error: Munge encode failed ...").
func (c *chaos) jobOut(kind string) string {
	if c.outDir == "" {
		return "/dev/null"
	}
	return c.env.JobPath(filepath.Join(c.outDir, "job-%j."+kind))
}

// checkOwnSessions checks, with -handoff, that every completed job's tasks ran on the session of its own last run
// (the session file the plugin opens is sealed for one run: a session handed on is sealed again for the run that
// takes it). It returns the problems, and how many runs took a session handed on.
func (c *chaos) checkOwnSessions(ctx context.Context, ids []uint32, states map[uint32]*slurmrest.Job) (problems []string, handed int, err error) {
	if c.outDir == "" {
		return nil, 0, nil
	}
	for _, id := range ids {
		rs, err := c.store.ForJob(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		var last reconcile.Reservation
		for _, r := range rs {
			evs, err := c.store.Events(ctx, r.ID)
			if err != nil {
				return nil, 0, err
			}
			for _, e := range evs {
				if e.Event == reconcile.EventTaken {
					handed++
				}
			}
			if r.Status.ReadyAt.After(last.Status.ReadyAt) { // the tasks ran on the session last made ready
				last = r
			}
		}
		if j := states[id]; j == nil || j.State != slurmrest.StateCompleted {
			continue
		}
		b, err := os.ReadFile(filepath.Join(c.outDir, fmt.Sprintf("job-%d.out", id)))
		if err != nil {
			problems = append(problems, fmt.Sprintf("job %d: its output: %v", id, err))
			continue
		}
		if got := strings.TrimSpace(string(b)); got != last.Status.SessionID {
			problems = append(problems, fmt.Sprintf("job %d ran on session %q, its run %d's is %q", id, got, last.Run.Run, last.Status.SessionID))
		}
	}
	return problems, handed, nil
}
