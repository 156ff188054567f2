// Package testbed gives integration tests the project's real test bed: the Slurm cluster and PostgreSQL
// server that test/testbed.sh starts. Tests call Require to get the environment and NewDatabase for a fresh
// database of their own, so integration tests can run in parallel.
//
// When the test bed is not up, Require skips the test with a message, except under CI=true, where every
// service is expected and a missing one fails the test.
package testbed

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	osuser "os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultEnvFile is where test/testbed.sh writes its env file; JUICE_TESTBED_ENV overrides it.
const DefaultEnvFile = "/var/tmp/juice-testbed/env"

// Env is the parsed env file.
type Env struct {
	Vars map[string]string
}

// Get returns one variable of the env file, or "" when it is absent.
func (e Env) Get(name string) string { return e.Vars[name] }

// Cluster, SlurmrestdURL, TokenFile, SlurmUser, Partition and PostgresURL name the values tests use most.
func (e Env) Cluster() string       { return e.Vars["JUICE_TESTBED_CLUSTER"] }
func (e Env) SlurmrestdURL() string { return e.Vars["JUICE_TESTBED_SLURMRESTD_URL"] }
func (e Env) TokenFile() string     { return e.Vars["JUICE_TESTBED_TOKEN_FILE"] }
func (e Env) SlurmUser() string     { return e.Vars["JUICE_TESTBED_SLURM_USER"] }
func (e Env) Partition() string     { return e.Vars["JUICE_TESTBED_PARTITION"] }
func (e Env) PostgresURL() string   { return e.Vars["JUICE_TESTBED_PG_URL"] }

// RuntimeRole is the PostgreSQL role the controller runs as in the test bed: it reads and writes rows and has
// no DDL rights. PostgresURL's user is the owner role, which creates databases and runs migrations.
func (e Env) RuntimeRole() string { return e.Vars["JUICE_TESTBED_PG_RUNTIME_ROLE"] }

// AsRuntime is a database URL of the owner role (NewDatabase's) with the runtime role as its user; the password
// comes from the same passfile.
func (e Env) AsRuntime(dbURL string) (string, error) {
	role := e.RuntimeRole()
	if role == "" {
		return "", fmt.Errorf("JUICE_TESTBED_PG_RUNTIME_ROLE is not in %s: the test bed predates its PostgreSQL roles (make testbed-up)", EnvFile())
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	u.User = url.User(role)
	return u.String(), nil
}

// RuntimeURL is AsRuntime for a test: it skips (fails in CI) when the test bed has no runtime role.
func RuntimeURL(t testing.TB, dbURL string) string {
	t.Helper()
	u, err := Require(t).AsRuntime(dbURL)
	if err != nil {
		Unavailable(t, "%v", err)
	}
	return u
}

// Chroot is the root directory of a chroot test bed (Slurm 24.11 or 26.05, test/chroot/slurm-chroot.sh), or ""
// for the host's.
func (e Env) Chroot() string { return e.Vars["JUICE_TESTBED_CHROOT"] }

// HostPath is the host's name of a path as the test bed's daemons and jobs see it.
func (e Env) HostPath(p string) string {
	if e.Chroot() == "" {
		return p
	}
	return filepath.Join(e.Chroot(), p)
}

// JobPath is the name jobs see for a host path inside the test bed (the inverse of HostPath). A host path
// outside a chroot test bed is returned as it is, and a job there cannot see it.
func (e Env) JobPath(p string) string {
	root := e.Chroot()
	if root == "" {
		return p
	}
	if rel, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(rel, "..") {
		return "/" + rel
	}
	return p
}

// Command runs a Slurm client (srun, sbatch, squeue...) of the test bed's own release: on the host as it is, in a
// chroot test bed through its JUICE_TESTBED_EXEC prefix (chroot, then root's clean environment inside it). The
// environment never carries SLURM_JWT (see CleanEnv).
func (e Env) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	prefix := strings.Fields(e.Vars["JUICE_TESTBED_EXEC"])
	var c *exec.Cmd
	if len(prefix) == 0 {
		c = exec.CommandContext(ctx, name, args...)
	} else {
		c = exec.CommandContext(ctx, prefix[0], append(append(prefix[1:], name), args...)...)
	}
	c.Env = CleanEnv()
	return c
}

// OtherUser is an ordinary user of the test bed other than the suites' (root): the chroots' second user, nobody on
// the host. It has an association in every account the suites use.
func (e Env) OtherUser() string { return e.getOr("JUICE_TESTBED_OTHER_USER", "nobody") }

// CommandAs is Command run as user: in a chroot test bed through its JUICE_TESTBED_EXEC_AS prefix, on the host
// through setpriv (no groups, no SLURM_JWT: MUNGE names the user).
func (e Env) CommandAs(ctx context.Context, user, name string, args ...string) *exec.Cmd {
	var c *exec.Cmd
	if prefix := strings.Fields(e.Vars["JUICE_TESTBED_EXEC_AS"]); len(prefix) > 0 {
		c = exec.CommandContext(ctx, prefix[0], append(append(prefix[1:], user, name), args...)...)
	} else {
		gid := user // setpriv takes a group's name or number: the user's own group
		if u, err := osuser.Lookup(user); err == nil {
			gid = u.Gid
		}
		c = exec.CommandContext(ctx, "setpriv", append([]string{"--reuid=" + user, "--regid=" + gid, "--clear-groups", name}, args...)...)
		c.Dir = "/tmp"
	}
	c.Env = CleanEnv()
	return c
}

// Scontrol is the host's command for the test bed's own scontrol, for a controller the suites start (--scontrol):
// in a chroot test bed a wrapper that runs the chroot's scontrol with its slurm.conf, since the host's is another
// release and talks to another slurmctld.
func (e Env) Scontrol() string { return e.getOr("JUICE_TESTBED_SCONTROL", "/usr/bin/scontrol") }

// getOr returns the variable, or def when it is absent.
func (e Env) getOr(name, def string) string {
	if v := e.Vars[name]; v != "" {
		return v
	}
	return def
}

// HookAddr is where the wired prolog and epilog expect the controller's hook API; SimAddr is where the suites run
// juice-sim. Each test bed has its own, so the releases can be tested side by side.
func (e Env) HookAddr() string { return "127.0.0.1:" + e.getOr("JUICE_TESTBED_HOOK_PORT", "7171") }
func (e Env) SimAddr() string  { return "127.0.0.1:" + e.getOr("JUICE_TESTBED_SIM_PORT", "7070") }

// HookSocket is the controller's hook socket the wired hooks call on the host's test bed (test/testbed.sh: its
// juice-config.sh names unix:<this>), empty on a chroot's, whose hooks call https://HookAddr. ControllerArgs
// gives a controller started by a suite the flags that serve it.
func (e Env) HookSocket() string {
	if strings.HasPrefix(e.Vars["JUICE_TESTBED_KIND"], "chroot-") || e.Vars["JUICE_TESTBED_DIR"] == "" {
		return ""
	}
	return filepath.Join(e.Vars["JUICE_TESTBED_DIR"], "run", "hook.sock")
}

// HookSocketArgs are the controller's flags that serve HookSocket to the bed's SlurmUser (none without one).
func (e Env) HookSocketArgs() []string {
	if e.HookSocket() == "" {
		return nil
	}
	return []string{"--hook-socket", e.HookSocket(), "--hook-socket-users", e.SlurmUser()}
}

// ClusterKey, HookSecret, HookCert, HookKey, PolicyFile and PlugstackEntry are the host's paths of the wiring's files.
func (e Env) ClusterKey() string {
	return e.getOr("JUICE_TESTBED_CLUSTER_KEY", "/etc/juice-slurm/cluster.key")
}
func (e Env) HookSecret() string {
	return e.getOr("JUICE_TESTBED_HOOK_SECRET", "/etc/juice-slurm/hook.secret")
}
func (e Env) HookCert() string {
	return e.getOr("JUICE_TESTBED_HOOK_CERT", HookCA)
}
func (e Env) HookKey() string {
	return e.getOr("JUICE_TESTBED_HOOK_KEY", "/etc/juice-slurm/hook.key")
}

// WaitHook waits for the hook API at addr over TLS, pinning the test bed's certificate (see WaitHookCA).
func (e Env) WaitHook(addr, path string, within time.Duration) error {
	return WaitHookCA(e.HookCert(), addr, path, within)
}
func (e Env) PolicyFile() string {
	return e.getOr("JUICE_TESTBED_POLICY", "/etc/juice-slurm/juice-policy.conf")
}
func (e Env) PlugstackEntry() string {
	return e.getOr("JUICE_TESTBED_PLUGSTACK_ENTRY", "/etc/slurm/plugstack.conf.d/juice.conf")
}

// HookLog is the host's path of the log the prolog and epilog write.
func (e Env) HookLog() string {
	return e.getOr("JUICE_TESTBED_HOOK_LOG", filepath.Join(e.Get("JUICE_TESTBED_DIR"), "log", "juice-hooks.log"))
}

// Nodes are the compute nodes' names (JUICE_TESTBED_NODES, comma separated).
func (e Env) Nodes() []string {
	var out []string
	for _, n := range strings.Split(e.Vars["JUICE_TESTBED_NODES"], ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Release names the test bed's Slurm release for messages ("22.05 (host)" when the env file does not say).
func (e Env) Release() string {
	v := e.getOr("JUICE_TESTBED_SLURM_VERSION", "22.05")
	return v + " (" + e.getOr("JUICE_TESTBED_KIND", "host") + ")"
}

// RunDir holds the pid files of the test bed's daemons (slurmrestd.pid above all).
func (e Env) RunDir() string {
	if e.Chroot() != "" {
		return filepath.Join(e.Chroot(), "juice-run")
	}
	return filepath.Join(e.Get("JUICE_TESTBED_DIR"), "run")
}

// LogDir is where the suites keep the logs of the processes they start.
func (e Env) LogDir() string {
	if e.Chroot() != "" {
		return filepath.Join(e.Chroot(), "juice-run")
	}
	return filepath.Join(e.Get("JUICE_TESTBED_DIR"), "log")
}

// UpCommand is the command that brings the test bed's missing daemons back (idempotent).
func (e Env) UpCommand(repo string) []string {
	if k := e.Vars["JUICE_TESTBED_KIND"]; strings.HasPrefix(k, "chroot-") {
		return []string{"bash", filepath.Join(repo, "test/chroot/slurm-chroot.sh"), "up", strings.TrimPrefix(k, "chroot-")}
	}
	return []string{"bash", filepath.Join(repo, "test/testbed.sh"), "up"}
}

// Load reads an env file of KEY=VALUE lines.
func Load(path string) (Env, error) {
	f, err := os.Open(path)
	if err != nil {
		return Env{}, fmt.Errorf("read test bed env file: %w", err)
	}
	defer f.Close()
	env := Env{Vars: map[string]string{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Env{}, fmt.Errorf("%s:%d: not KEY=VALUE: %q", path, n, line)
		}
		env.Vars[k] = v
	}
	if err := sc.Err(); err != nil {
		return Env{}, err
	}
	// A chroot test bed uses the host test bed's PostgreSQL: take its connection settings from the host's env
	// file as they are now (they change when the host test bed is brought up again), not as copied at `up`.
	if root := env.Chroot(); root != "" {
		if host, err := Load(filepath.Join(filepath.Dir(root), "env")); err == nil && host.Chroot() == "" {
			for k, v := range host.Vars {
				if strings.HasPrefix(k, "JUICE_TESTBED_PG_") {
					env.Vars[k] = v
				}
			}
		}
	}
	return env, nil
}

// EnvFile is the env file in use: $JUICE_TESTBED_ENV or DefaultEnvFile.
func EnvFile() string {
	if p := os.Getenv("JUICE_TESTBED_ENV"); p != "" {
		return p
	}
	return DefaultEnvFile
}

// InCI reports whether the tests run in CI, where every service must be there.
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips the test, or fails it under CI=true, saying what is missing and how to bring it up.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...) + " (start it with: make testbed-up)"
	if InCI() {
		t.Fatalf("CI=true and a service is missing: %s", msg)
	}
	t.Skip(msg)
}

// Require returns the test bed's environment, or skips (fails in CI) when the test bed is not up.
func Require(t testing.TB) Env {
	t.Helper()
	path := EnvFile()
	env, err := Load(path)
	if err != nil {
		Unavailable(t, "test bed env file %s: %v", path, err)
	}
	return env
}

// NewDatabase creates an empty database of the test's own on the test bed's PostgreSQL server and drops it
// when the test ends. It returns the database's URL.
func NewDatabase(t testing.TB) string {
	t.Helper()
	env := Require(t)
	if env.PostgresURL() == "" {
		Unavailable(t, "JUICE_TESTBED_PG_URL is not in %s", EnvFile())
	}
	url, drop, err := CreateDatabase(context.Background(), env)
	if err != nil {
		Unavailable(t, "%v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("%v", err)
		}
	})
	return url
}

// testDBPrefix starts the name of every database CreateDatabase makes; the Unix time of its creation follows.
const testDBPrefix = "juice_test_"

// staleAfter is the age past which a test database is taken for one whose drop never ran: no test or benchmark
// runs that long.
const staleAfter = 24 * time.Hour

// dropStaleDatabases drops the test databases made more than staleAfter before now: best effort, since another
// run may be dropping them too, and a failure here must not fail the test that is starting.
func dropStaleDatabases(ctx context.Context, conn *pgx.Conn, now time.Time) {
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'juice\\_test\\_%'")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range names {
		if created, ok := testDBCreated(name); ok && now.Sub(created) > staleAfter {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		}
	}
}

// testDBCreated reads the creation time out of a test database's name; ok is false for any other name (those of
// older versions, without the time, are left alone).
func testDBCreated(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, testDBPrefix)
	if !ok {
		return time.Time{}, false
	}
	ts, _, ok := strings.Cut(rest, "_")
	if !ok {
		return time.Time{}, false
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sec <= 0 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

// CreateDatabase creates an empty database with a random name and returns its URL and a function that drops it.
func CreateDatabase(ctx context.Context, env Env) (string, func() error, error) {
	admin := env.PostgresURL()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to PostgreSQL at %s: %w", redact(admin), err)
	}
	defer conn.Close(ctx)
	dropStaleDatabases(ctx, conn, time.Now())
	// The creation time is in the name: a database whose drop never ran (a killed run) is found by its age.
	name := fmt.Sprintf("%s%d_%s", testDBPrefix, time.Now().Unix(), randomSuffix())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer c.Close(ctx)
		// WITH (FORCE) ends connections a test forgot to close, so the drop never waits on them.
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, fmt.Errorf("parse PostgreSQL URL: %w", err)
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

// Migrator migrates the database at ownerURL as its owner role and grants runtimeRole what the controller needs
// at run time (rows, no DDL): what an installation does before it starts the controller. test/world's Migrate does
// it in-process, Binary with `juice-slurm migrate`.
type Migrator func(ctx context.Context, ownerURL, runtimeRole string) error

// Binary is the Migrator of the suites that test the built binaries: `juice-slurm migrate` of the repository's
// build (bin/juice-slurm).
func Binary(repo string) Migrator {
	return func(ctx context.Context, ownerURL, runtimeRole string) error {
		ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(repo, "bin", "juice-slurm"), "migrate", "--database-url", ownerURL,
			"--runtime-role", runtimeRole).CombinedOutput()
		if err != nil {
			return fmt.Errorf("juice-slurm migrate: %v: %s", err, out)
		}
		return nil
	}
}

// Database is a migrated database of the test bed, as an installation has it: Owner is its URL for the owner
// role, which migrated it (tests that look under the schema use it); Runtime is its URL for the runtime role,
// the one the controller and the admin commands connect as.
type Database struct {
	Owner, Runtime string
}

// ErrUnavailable wraps the errors that say the test bed, or a part of it, is not up: a test skips on them (fails
// in CI), where any other error fails it.
var ErrUnavailable = errors.New("the test bed is not up")

// CreateMigrated creates a database (CreateDatabase), migrates it with m as the owner role granting the runtime
// role, and returns its URLs and a function that drops it.
func CreateMigrated(ctx context.Context, env Env, m Migrator) (Database, func() error, error) {
	if env.PostgresURL() == "" {
		return Database{}, nil, fmt.Errorf("%w: JUICE_TESTBED_PG_URL is not in %s", ErrUnavailable, EnvFile())
	}
	owner, drop, err := CreateDatabase(ctx, env)
	if err != nil {
		return Database{}, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	runtime, err := env.AsRuntime(owner)
	if err != nil {
		_ = drop()
		return Database{}, nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := m(ctx, owner, env.RuntimeRole()); err != nil {
		_ = drop()
		return Database{}, nil, fmt.Errorf("migrate %s: %w", redact(owner), err)
	}
	return Database{Owner: owner, Runtime: runtime}, drop, nil
}

// NewMigrated is CreateMigrated for a test: the database is dropped when the test ends, and the test skips (fails
// in CI) when the test bed is not up.
func NewMigrated(t testing.TB, m Migrator) Database {
	t.Helper()
	db, drop, err := CreateMigrated(context.Background(), Require(t), m)
	if errors.Is(err, ErrUnavailable) {
		Unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Logf("%v", err)
		}
	})
	return db
}

// Repo is the repository the running test or tool was built from: the nearest directory above the working
// directory that holds juice-slurm's go.mod. Its binaries (bin/) and scripts are the ones to test, whichever
// checkout brought the test bed up.
func Repo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/juice-slurm/juice-slurm\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no juice-slurm go.mod above %s", dir)
		}
		dir = parent
	}
}

func randomSuffix() string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}
