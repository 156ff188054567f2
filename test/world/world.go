// Package world builds the environment the PostgreSQL-backed tests and the benchmarks run the controller's pieces
// in, the way an installation has them: a fresh database of the test bed's PostgreSQL migrated by the owner role,
// a store on it as the runtime role (rows, no DDL: what the controller connects as in production), an in-process
// Juice simulator with a token file and the production Juice client pointed at it, a scripted Slurm
// (test/fakeslurm), a cluster key and a hook secret file. It also holds the helpers those suites share (Count).
//
// Tests call New, which skips (fails in CI) when the test bed is not up and undoes everything when the test ends;
// the benchmarks and TestMain-driven suites call Build and Close.
//
// The controller itself is not started here: the controller package's own tests use this package, so it cannot
// import the controller; each suite starts it the way it needs.
package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
	"github.com/juice-slurm/juice-slurm/test/testbed"
)

// Token is the Juice token of every world's simulator and client, unless its Config.Sim says another.
const Token = "m2m_juice_test_world_token_0123"

// Key and Secret are every world's cluster key (the sealing key of session.StaticKey) and hook secret.
var (
	Key    = []byte("0123456789abcdef0123456789abcdef")
	Secret = []byte("hook-secret-for-the-test-worlds-0123")
)

// Config says what a world needs; its zero value is a migrated database and its store, without a simulator.
type Config struct {
	// Cluster is the store's cluster; "c1" when empty.
	Cluster string
	// DBURL is a database migrated elsewhere (a benchmark's child process, the failover pair) that the world uses
	// as it is; empty creates a fresh one on the test bed, dropped by Close.
	DBURL string
	// Migrator migrates a fresh database; nil is Migrate (in-process). The suites that test the built binaries
	// pass testbed.Binary.
	Migrator testbed.Migrator
	// NoStore leaves the database's pool and store unopened (the suites whose controller is a process).
	NoStore bool
	// NoDatabase makes no database at all (the Juice client's tests, which need no PostgreSQL).
	NoDatabase bool
	// PoolMaxConns, when set, overrides pgxpool's default size (max(4, NumCPU)), the one the controller runs with.
	PoolMaxConns int
	// Token is what the token file holds, the client's token; empty is the simulator's. The Juice client's tests
	// give another one than the simulator's to see it refused.
	Token string
	// Sim starts an in-process simulator with this configuration (its Token defaults to Token); nil starts none.
	Sim *juicesim.Config
	// SimLog is the simulator's log; the zero value discards it.
	SimLog logr.Logger
	// SimURL points the Juice client at a simulator elsewhere (another process) when Sim is nil.
	SimURL string
	// Client adjusts the Juice client's configuration once the world has set its BaseURL, TokenFile (and Pools);
	// nil keeps the production defaults.
	Client func(*juiceapi.HTTPConfig)
	// PoolIDs maps each of the simulator's pool names to its id in the client, as an administrator configures it
	// for the legacy controller.
	PoolIDs bool
}

// World is one suite's or benchmark's environment. Fields of parts the Config did not ask for are nil.
type World struct {
	// DB is the database's URLs: the owner role's (empty when Config.DBURL was given) and the runtime role's.
	DB testbed.Database
	// Pool and Store are the runtime role's, as the controller has them.
	Pool  *pgxpool.Pool
	Store *store.Store
	Sim   *juicesim.Server
	Juice *juiceapi.HTTPClient
	// TokenFile holds the Juice token (0600), for the client and for a simulator started as a process.
	TokenFile string
	Slurm     *fakeslurm.Slurm
	Key       []byte
	// SecretFile holds Secret (0600, as the hook demands); Secret reads it as the controller does.
	SecretFile string
	Secret     *secretfile.File
	// Dir is a temporary directory of the world's own, removed by Close.
	Dir string

	closers []func()
}

// Migrate is the in-process Migrator: store.Migrate as the owner role, then store.GrantRuntime, as
// `juice-slurm migrate --runtime-role` does.
func Migrate(ctx context.Context, ownerURL, runtimeRole string) error {
	pool, err := pgxpool.New(ctx, ownerURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	st := store.New(pool, "")
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	if runtimeRole == "" {
		return nil
	}
	return st.GrantRuntime(ctx, runtimeRole)
}

// New builds a world for a test and closes it when the test ends; it skips the test (fails it in CI) when the
// test bed is not up.
func New(t testing.TB, cfg Config) *World {
	t.Helper()
	w, err := Build(context.Background(), cfg)
	if errors.Is(err, testbed.ErrUnavailable) {
		testbed.Unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatalf("build the test world: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

// Build builds a world; Close undoes it. Errors that say the test bed is not up wrap testbed.ErrUnavailable.
func Build(ctx context.Context, cfg Config) (_ *World, err error) {
	// w is not the named result: a `return nil, err` must leave it for the deferred Close (it once closed nil).
	w := &World{Slurm: fakeslurm.New(), Key: Key}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	if w.Dir, err = os.MkdirTemp("", "juice-world-"); err != nil {
		return nil, err
	}
	dir := w.Dir
	w.closers = append(w.closers, func() { os.RemoveAll(dir) })
	if !cfg.NoDatabase {
		if err := w.database(ctx, cfg); err != nil {
			return nil, err
		}
	}
	if !cfg.NoDatabase && !cfg.NoStore {
		if err := w.openStore(ctx, cfg); err != nil {
			return nil, err
		}
	}
	w.SecretFile = filepath.Join(w.Dir, "hook.secret")
	if err := os.WriteFile(w.SecretFile, append(append([]byte{}, Secret...), '\n'), 0o600); err != nil {
		return nil, err
	}
	// The controller's own check (cmd/juice-slurm): a hook secret shorter than 16 bytes is refused.
	w.Secret = secretfile.New(w.SecretFile, secretfile.MinLength(16))
	simToken := Token
	if cfg.Sim != nil && cfg.Sim.Token != "" {
		simToken = cfg.Sim.Token
	}
	token := cfg.Token
	if token == "" {
		token = simToken
	}
	w.TokenFile = filepath.Join(w.Dir, "juice.token")
	if err := os.WriteFile(w.TokenFile, []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	simURL := cfg.SimURL
	if cfg.Sim != nil {
		sc := *cfg.Sim
		sc.Token = simToken
		log := cfg.SimLog
		if log.GetSink() == nil {
			log = logr.Discard()
		}
		if w.Sim, err = juicesim.StartServer(sc, log); err != nil {
			return nil, fmt.Errorf("start the simulator: %w", err)
		}
		sim := w.Sim
		w.closers = append(w.closers, func() { _ = sim.Close() })
		simURL = w.Sim.URL
	}
	if simURL != "" {
		hc := juiceapi.HTTPConfig{BaseURL: simURL, TokenFile: w.TokenFile}
		if cfg.PoolIDs && w.Sim != nil {
			hc.Pools = map[string]string{}
			for _, p := range cfg.Sim.Pools {
				if id, ok := w.Sim.Sim.PoolID(p.ID); ok {
					hc.Pools[p.ID] = id
				}
			}
		}
		if cfg.Client != nil {
			cfg.Client(&hc)
		}
		if w.Juice, err = juiceapi.NewHTTPClient(hc); err != nil {
			return nil, fmt.Errorf("the Juice client: %w", err)
		}
	}
	return w, nil
}

// database makes (or takes) the world's database.
func (w *World) database(ctx context.Context, cfg Config) error {
	if cfg.DBURL != "" {
		w.DB = testbed.Database{Runtime: cfg.DBURL}
		return nil
	}
	env, err := testbed.Load(testbed.EnvFile())
	if err != nil {
		return fmt.Errorf("%w (make testbed-up): %v", testbed.ErrUnavailable, err)
	}
	m := cfg.Migrator
	if m == nil {
		m = Migrate
	}
	db, drop, err := testbed.CreateMigrated(ctx, env, m)
	if err != nil {
		return err
	}
	w.DB = db
	w.closers = append(w.closers, func() { _ = drop() })
	return nil
}

// openStore opens the runtime role's pool and store, and checks the schema as the controller does at start.
func (w *World) openStore(ctx context.Context, cfg Config) error {
	// pgxpool.New with the URL as is: the pool the controller builds (cmd/juice-slurm), with its default size.
	url := w.DB.Runtime
	if cfg.PoolMaxConns > 0 {
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		url += fmt.Sprintf("%spool_max_conns=%d", sep, cfg.PoolMaxConns)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	w.Pool = pool
	w.closers = append(w.closers, pool.Close)
	cluster := cfg.Cluster
	if cluster == "" {
		cluster = "c1"
	}
	w.Store = store.New(pool, cluster)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return w.Store.CheckSchema(ctx)
}

// Close undoes Build, last thing first.
func (w *World) Close() {
	for i := len(w.closers) - 1; i >= 0; i-- {
		w.closers[i]()
	}
	w.closers = nil
}
