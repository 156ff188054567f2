//go:build e2e

// Package e2e tests juice-slurm as its users meet it: real srun, sbatch and salloc on the test bed's Slurm
// cluster with the SPANK plugin, job_submit.lua and the prolog/epilog hooks wired in (make testbed-wire), the
// juice-slurm controller and juice-sim running as processes, and PostgreSQL.
//
//	make test-e2e     (brings the test bed up and wires it first)
//
// With JUICE_E2E_JUICE=legacy the Juice side is the legacy open-source controller that test/juicelegacy/legacy.sh
// up runs (its env file: JUICE_LEGACY_ENV, default /var/tmp/juice-testbed/legacy/env) instead of juice-sim;
// make test-juice-legacy runs the subset that applies to it.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/testbed"
	testworld "github.com/juice-slurm/juice-slurm/test/world"
)

// simAddr and hookAddr are the test bed's own (testbed.Env.SimAddr, HookAddr): every release's test bed has its
// ports, so the suite can run against each of them side by side.
var simAddr, hookAddr string

// world is what every test shares: the processes TestMain started.
var world struct {
	env        testbed.Env
	dir        string
	dbURL      string
	simToken   string
	simAdmin   testworld.SimAdmin
	controller *exec.Cmd
	sim        *exec.Cmd // juice-sim's process (nil with the legacy controller)
	ctlLog     string
	policy     string // the controller's site policy: the bed's, with hand-off on in pool demo
	slurm      *slurmrest.Client
	repo       string

	// The Juice side: juice-sim, or with legacy the legacy controller, read through our client.
	juiceURL, juiceToken, juicePools string
	legacy                           *testbed.Env
	juice                            *juiceapi.HTTPClient
}

// legacyMode: the Juice side is the legacy controller (JUICE_E2E_JUICE=legacy).
func legacyMode() bool { return os.Getenv("JUICE_E2E_JUICE") == "legacy" }

func TestMain(m *testing.M) {
	os.Exit(runAll(m))
}

func runAll(m *testing.M) int {
	env, err := testbed.Load(testbed.EnvFile())
	if err != nil {
		return fail("the test bed is not up (make testbed-up): %v", err)
	}
	world.env = env
	simAddr, hookAddr = env.SimAddr(), env.HookAddr()
	fmt.Fprintf(os.Stderr, "e2e: Slurm %s, slurmrestd %s, juice-sim %s, hook API %s\n", env.Release(), env.SlurmrestdURL(), simAddr, hookAddr)
	if world.repo, err = testbed.Repo(); err != nil {
		return fail("%v", err)
	}
	if _, err := os.Stat(env.PlugstackEntry()); err != nil {
		return fail("the test bed is not wired (make testbed-wire, or test/chroot/slurm-chroot.sh wire SUITE): %v", err)
	}
	// Jobs write their output here: inside the chroot of a chroot test bed, so both they and the tests see it.
	dir, err := os.MkdirTemp(env.HostPath(os.TempDir()), "juice-e2e-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(dir)
	world.dir = dir
	// The controller's policy: the bed's, with session hand-off on in pool demo (handoff_test.go). Not a limit,
	// so job_submit.lua, which reads the bed's, needs no copy.
	policy, err := os.ReadFile(env.PolicyFile())
	if err != nil {
		return fail("the test bed's site policy: %v", err)
	}
	world.policy = filepath.Join(dir, "juice-policy.conf")
	must(os.WriteFile(world.policy, append(policy, "\n# The e2e suite's own: session hand-off in pool demo.\npool.demo.handoff = on\n"...), 0o644))
	ctx := context.Background()
	// Migrated as the owner role by juice-slurm migrate; the controller and the checks run as the runtime role.
	tw, err := testworld.Build(ctx, testworld.Config{Migrator: testbed.Binary(world.repo), NoStore: true})
	if err != nil {
		return fail("%v", err)
	}
	defer tw.Close()
	world.dbURL = tw.DB.Runtime
	world.simAdmin = testworld.SimAdmin{URL: "http://" + simAddr, Token: testworld.Token}

	// The demo may have left its own simulator and controller on these ports: they are the test bed's, stop
	// them by their pid files.
	for _, name := range []string{"juice-controller", "juice-sim"} {
		testbed.StopPidFile(filepath.Join(env.RunDir(), name+".pid"))
	}

	if legacyMode() {
		return runLegacy(m, ctx)
	}
	for _, addr := range []string{simAddr, hookAddr} {
		if err := testbed.PortFree(addr); err != nil {
			return fail("%v", err)
		}
	}
	world.simToken = tw.TokenFile
	world.juiceURL, world.juiceToken = "http://"+simAddr, world.simToken
	simCfg := filepath.Join(dir, "sim.json")
	// Pool "test" is roomy; pool "small" has one GPU, to fill it on purpose; pool "lab" has limits of its own in
	// the test bed's site policy (test/testbed/juice-policy.extra); pool "demo" (as the legacy controller's: one
	// agent of 4 GPUs) has session hand-off on in the suite's own copy of that policy (handoff_test.go).
	must(os.WriteFile(simCfg, []byte(`{"tick": "100ms", "activateDelay": "200ms", "cancelDelay": "100ms",
		"pools": [{"id": "test", "agents": [{"count": 2, "gpus": 4, "vram": "80GiB"}]},
		          {"id": "small", "agents": [{"gpus": 1, "vram": "16GiB"}]},
		          {"id": "lab", "agents": [{"gpus": 2, "vram": "24GiB"}]},
		          {"id": "demo", "agents": [{"gpus": 4, "vram": "80GiB"}]}]}`), 0o644))
	sim := exec.Command(filepath.Join(world.repo, "bin/juice-sim"), "--listen", simAddr, "--token-file", world.simToken,
		"--config", simCfg, "--log-format", "json")
	simLog := filepath.Join(dir, "juice-sim.log")
	if err := testbed.StartLogged(sim, simLog); err != nil {
		return fail("start juice-sim: %v", err)
	}
	world.sim = sim
	defer testbed.StopProcess(sim)
	if err := testbed.WaitHTTP("http://"+simAddr+"/healthz", 20*time.Second); err != nil {
		return fail("juice-sim: %v\n%s", err, tail(simLog))
	}

	world.ctlLog = filepath.Join(dir, "controller.log")
	if err := startController(); err != nil {
		return fail("start the controller: %v", err)
	}
	defer func() { testbed.StopProcess(world.controller) }()

	tok := slurmrest.FileToken(env.TokenFile())
	world.slurm, err = slurmrest.New(slurmrest.Config{BaseURL: env.SlurmrestdURL(), UserName: env.SlurmUser(), TokenSource: tok})
	if err != nil {
		return fail("%v", err)
	}
	code := m.Run()
	// After every test, whatever they did: no reservation is left open and no session leaked.
	if err := checkNoLeaks(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: leak check after the run: %v\n", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- controller log (last lines) ---\n%s\n--- juice-sim log ---\n%s\n", tail(world.ctlLog), tail(simLog))
	}
	return code
}

// licensed reports whether the test bed serves each pool as a Slurm license (slurmdbd, JUICE_LICENSES=on).
func licensed() bool { return world.env.Get("JUICE_TESTBED_ACCOUNTING") == "1" }

// startController starts (or restarts) the controller process, appending to its log.
func startController() error { return startControllerOn(world.dbURL) }

// startControllerOn starts the controller with the given database URL, and extra flags after the suite's.
func startControllerOn(dbURL string, extra ...string) error {
	c := exec.Command(filepath.Join(world.repo, "bin/juice-slurm"), "controller", "--config=",
		"--cluster", world.env.Cluster(), "--database-url", dbURL,
		"--slurmrestd-url", world.env.SlurmrestdURL(), "--slurm-user", world.env.SlurmUser(),
		"--slurm-token-file", world.env.TokenFile(),
		"--juice-url", world.juiceURL, "--juice-token-file", world.juiceToken, "--juice-pools", world.juicePools,
		"--cluster-key", world.env.ClusterKey(), "--hook-secret", world.env.HookSecret(), "--policy", world.policy,
		"--hook-cert", world.env.HookCert(), "--hook-key", world.env.HookKey(), "--hook-listen", hookAddr,
		"--scontrol", world.env.Scontrol(), "--state-dir", world.env.Get("JUICE_TESTBED_SESSIONS_DIR"),
		"--poll-interval", "500ms", "--session-poll", "100ms", "--lease-ttl", "3s", "--sweep-interval", "10s",
		"--log-format", "json")
	// The host's bed wires its hooks to the controller's Unix socket (hook-url = unix:...).
	c.Args = append(c.Args, world.env.HookSocketArgs()...)
	// The pools are Slurm licenses wherever the bed has accounting (every bed does since issue 23): the controller
	// keeps their counts, as the bed's own controller does.
	if licensed() {
		c.Args = append(c.Args, "--licenses=on", "--sacctmgr", world.env.Get("JUICE_TESTBED_SACCTMGR"))
		// and the policy's per-user caps are Slurm's limits on QOS normal (AccountingStorageEnforce=limits).
		if q := world.env.Get("JUICE_TESTBED_CAPS_QOS"); q != "" {
			c.Args = append(c.Args, "--caps-qos="+q)
		}
	}
	c.Args = append(c.Args, extra...)
	if err := testbed.StartLogged(c, world.ctlLog); err != nil {
		return err
	}
	world.controller = c
	if err := world.env.WaitHook(hookAddr, "/readyz", 60*time.Second); err != nil {
		return fmt.Errorf("%v\n%s", err, tail(world.ctlLog))
	}
	return nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}

func fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
	return 1
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// simSessions lists every session the simulator knows, closed ones included.
func simSessions(t *testing.T) []juiceapi.Session {
	t.Helper()
	out, err := listSimSessions()
	if err != nil {
		t.Fatalf("list simulator sessions: %v", err)
	}
	return out
}

func listSimSessions() ([]juiceapi.Session, error) {
	if world.legacy != nil {
		return legacySessions()
	}
	return world.simAdmin.Sessions(context.Background())
}

// checkNoLeaks waits (bounded) for every reservation to be final, then checks that the simulator holds no live
// session.
func checkNoLeaks(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, world.dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	st := store.New(pool, world.env.Cluster())
	deadline := time.Now().Add(60 * time.Second)
	for {
		open, err := st.Open(ctx)
		if err != nil {
			return err
		}
		if len(open) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var runs []string
			for _, r := range open {
				runs = append(runs, fmt.Sprintf("%s (%s: %s)", r.Run, r.Status.State, r.Status.Reason))
			}
			return fmt.Errorf("%d reservations still open a minute after the last test: %s", len(open), strings.Join(runs, ", "))
		}
		time.Sleep(500 * time.Millisecond)
	}
	sessions, err := listSimSessions()
	if err != nil {
		return err
	}
	var leaked []string
	for _, s := range sessions {
		if !s.Ended() {
			leaked = append(leaked, fmt.Sprintf("%s (%s, key %s)", s.ID, s.State, s.IdempotencyKey))
		}
	}
	if len(leaked) > 0 {
		return fmt.Errorf("%d sessions leaked: %s", len(leaked), strings.Join(leaked, ", "))
	}
	return nil
}

// runLegacy is runAll's second half with the legacy controller as the Juice side: it must be up already (make
// juice-legacy-up); the controller is pointed at it with its pools mapped by name (--juice-pools).
func runLegacy(m *testing.M, ctx context.Context) int {
	path := os.Getenv("JUICE_LEGACY_ENV")
	if path == "" {
		path = "/var/tmp/juice-testbed/legacy/env"
	}
	lenv, err := testbed.Load(path)
	if err != nil {
		return fail("JUICE_E2E_JUICE=legacy but the legacy controller is not up (make juice-legacy-up): %v", err)
	}
	world.legacy = &lenv
	world.juiceURL, world.juiceToken, world.juicePools = lenv.Get("JUICE_LEGACY_URL"), lenv.Get("JUICE_LEGACY_TOKEN_FILE"), lenv.Get("JUICE_LEGACY_POOLS")
	pools, err := juiceapi.ParsePools(world.juicePools)
	if err != nil {
		return fail("JUICE_LEGACY_POOLS: %v", err)
	}
	if world.juice, err = juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: world.juiceURL, TokenFile: world.juiceToken, Pools: pools}); err != nil {
		return fail("%v", err)
	}
	if err := testbed.PortFree(hookAddr); err != nil {
		return fail("%v", err)
	}
	world.ctlLog = filepath.Join(world.dir, "controller.log")
	if err := startController(); err != nil {
		return fail("start the controller: %v", err)
	}
	defer func() { testbed.StopProcess(world.controller) }()
	tok := slurmrest.FileToken(world.env.TokenFile())
	world.slurm, err = slurmrest.New(slurmrest.Config{BaseURL: world.env.SlurmrestdURL(), UserName: world.env.SlurmUser(), TokenSource: tok})
	if err != nil {
		return fail("%v", err)
	}
	code := m.Run()
	if err := checkNoLeaks(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: leak check after the run: %v\n", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- controller log (last lines) ---\n%s\n--- legacy controller log ---\n%s\n", tail(world.ctlLog),
			tail(filepath.Join(lenv.Get("JUICE_LEGACY_LOG_DIR"), "controller.log")))
	}
	return code
}

// legacySessions are the sessions the legacy controller's active agents hold (it has no session listing, and
// forgets closed sessions on its agents), each with the key its version field carries.
func legacySessions() ([]juiceapi.Session, error) {
	view, err := juiceapi.WalkPool(context.Background(), world.juice, "", time.Now())
	if err != nil {
		return nil, err
	}
	var out []juiceapi.Session
	for _, a := range view.Agents {
		for _, s := range a.Sessions {
			s.IdempotencyKey = s.Key()
			out = append(out, s)
		}
	}
	return out, nil
}

// legacyAgentsAdmin posts to the legacy agent emulator's admin API (e.g. "/agents/emu-small/restart").
func legacyAgentsAdmin(t *testing.T, path string) {
	t.Helper()
	resp, err := http.Post(world.legacy.Get("JUICE_LEGACY_AGENTS_URL")+path, "application/json", nil)
	if err != nil {
		t.Fatalf("agent emulator %s: %v", path, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("agent emulator %s: HTTP %d", path, resp.StatusCode)
	}
}
