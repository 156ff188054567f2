//go:build failover

// Package failover runs the controller against a PostgreSQL primary and its streaming standby (test/pgpair.sh),
// with a multi-host URL (target_session_attrs=read-write), and promotes the standby in the middle of a run of
// jobs while the old primary stops at once. make test-failover brings the pair up and down around it.
package failover

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/slurmrest"
	"github.com/juice-slurm/juice-slurm/test/fakeslurm"
	"github.com/juice-slurm/juice-slurm/test/testbed"
	"github.com/juice-slurm/juice-slurm/test/world"
)

func pairEnv(t *testing.T) map[string]string {
	t.Helper()
	dir := os.Getenv("JUICE_PGPAIR_DIR")
	if dir == "" {
		dir = "/var/tmp/juice-testbed/pgpair"
	}
	f, err := os.Open(filepath.Join(dir, "env"))
	if err != nil {
		testbed.Unavailable(t, "no PostgreSQL pair: %v (make test-failover brings it up with test/pgpair.sh up)", err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

const jobs = 60

// The failover case of the chaos run: 60 jobs, each reserved, made ready, ended and released, one after another
// in a steady stream; after the 20th is ready the standby is promoted and the primary stops. Every job must get
// its session, every session must be released (0 leaked), no run may get two sessions, and the time the
// controller needed to serve again is reported.
func TestPromoteTheStandbyMidRun(t *testing.T) {
	env := pairEnv(t)
	ctx := context.Background()
	pairURL := env["JUICE_PGPAIR_URL"]
	// A database of its own, made on the primary (and streamed to the standby).
	admin, err := pgx.Connect(ctx, pairURL)
	require.NoError(t, err)
	db := fmt.Sprintf("juice_failover_%d", time.Now().UnixNano())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	require.NoError(t, err)
	admin.Close(ctx)
	url := strings.Replace(pairURL, "/postgres?", "/"+db+"?", 1)

	// Migrated as the pair's only role (it has no runtime role); the rest of the world as every suite has it.
	require.NoError(t, world.Migrate(ctx, url, ""))
	w := world.New(t, world.Config{DBURL: url, SimLog: testr.New(t).V(1),
		Sim: &juicesim.Config{Pools: []juicesim.PoolConfig{juicesim.UniformPool("test", 4, 8, 80*vram.GiB)}},
		Client: func(hc *juiceapi.HTTPConfig) {
			hc.MaxAttempts, hc.InitialBackoff, hc.Timeout = 3, 10*time.Millisecond, 5*time.Second
		}})
	st, slurm := w.Store, w.Slurm
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &controller.Controller{
		Config: controller.Config{Cluster: "c1", Holder: "a", PollInterval: 100 * time.Millisecond,
			WaitPoll: 20 * time.Millisecond, LeaseTTL: 2 * time.Second, LeaseRenew: 300 * time.Millisecond,
			Lookahead: reconcile.DefaultLookahead},
		Store: st, Slurm: slurm, Juice: w.Juice, Key: session.StaticKey(w.Key), Secret: w.Secret, Log: testr.New(t).V(1), Listener: ln,
		MetricsListener: mln, Metrics: controller.NewMetrics(st)}
	cctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(cctx) }()
	defer func() { stop(); <-done }()

	stateOf := func(job uint32) reconcile.State {
		r, err := st.ForRun(ctx, reconcile.RunID{Cluster: "c1", JobID: job})
		if err != nil {
			return ""
		}
		return r.Status.State
	}
	ready := func() bool {
		resp, err := http.Get("http://" + mln.Addr().String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}

	var (
		mu          sync.Mutex
		failedAt    time.Time // the old primary is being stopped, then the standby promoted
		promoted    time.Time // test/pgpair.sh promote returned
		unready     bool      // /readyz failed after failedAt
		readyzAt    time.Time // the first /readyz OK after it failed
		submittedAt = map[uint32]time.Time{}
		readyAt     = map[uint32]time.Time{}
		failedOne   = make(chan struct{})
	)
	// The jobs: each runs until its session is ready, then ends.
	for job := uint32(1); job <= jobs; job++ {
		mu.Lock()
		submittedAt[job] = time.Now()
		mu.Unlock()
		slurm.Set(fakeslurm.JuiceJob(job, 0, slurmrest.StateRunning, "juice:v1:pool=test,gpus=1"))
		deadline := time.Now().Add(60 * time.Second)
		for stateOf(job) != reconcile.StateReady {
			require.True(t, time.Now().Before(deadline), "job %d not ready within 60s (state %q)", job, stateOf(job))
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		readyAt[job] = time.Now()
		mu.Unlock()
		slurm.Remove(job)
		if job == 20 {
			// Mid-run, while job 20's release is under way: promote the standby, stop the primary.
			mu.Lock()
			failedAt = time.Now()
			mu.Unlock()
			probed := make(chan struct{})
			go func() { // /readyz through the outage: when it fails, and when it answers again
				defer close(probed)
				for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
					ok := ready()
					mu.Lock()
					if !ok {
						unready = true
					} else if unready {
						readyzAt = time.Now()
						mu.Unlock()
						return
					}
					done := !promoted.IsZero() && time.Since(promoted) > 5*time.Second
					mu.Unlock()
					if done {
						return // never unready: the pool moved to the new primary between two probes
					}
				}
			}()
			go func() {
				defer close(failedOne)
				defer func() { <-probed }()
				out, err := exec.Command("bash", "../pgpair.sh", "promote").CombinedOutput()
				mu.Lock()
				promoted = time.Now()
				mu.Unlock()
				require.NoError(t, err, "%s", out)
			}()
		}
	}
	<-failedOne

	// Every run released, no session left, one session per run.
	deadline := time.Now().Add(60 * time.Second)
	for {
		open, err := st.Open(ctx)
		if err == nil && len(open) == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "reservations still open 60s after the last job: %d (%v)", len(open), err)
		time.Sleep(50 * time.Millisecond)
	}
	live, perKey := 0, map[string]int{}
	for _, s := range w.Sim.Sim.Sessions() {
		if !s.Ended() {
			live++
		}
		perKey[s.IdempotencyKey]++
	}
	var runs, doubled int
	for job := uint32(1); job <= jobs; job++ {
		rs, err := st.ForJob(ctx, job)
		require.NoError(t, err)
		runs++
		if len(rs) != 1 {
			doubled++
			continue
		}
		if perKey[rs[0].ID.String()] != 1 {
			doubled++
		}
		require.Equal(t, reconcile.StateReleased, rs[0].Status.State, "job %d", job)
	}
	sessions := len(w.Sim.Sim.Sessions())
	mu.Lock()
	// Recovery: from the moment the primary began to go to the first job submitted after it being ready.
	var firstAfter uint32
	for job := uint32(1); job <= jobs; job++ {
		if !submittedAt[job].Before(failedAt) {
			firstAfter = job
			break
		}
	}
	require.NotZero(t, firstAfter, "a job was submitted after the failover began")
	recovery := readyAt[firstAfter].Sub(failedAt)
	readyz := "never failed"
	if !readyzAt.IsZero() {
		readyz = "failed and answered again " + readyzAt.Sub(failedAt).Round(time.Millisecond).String() + " after the primary began to stop"
	}
	promotion := promoted.Sub(failedAt)
	mu.Unlock()
	report := fmt.Sprintf("failover: %d jobs, %d sessions, %d leaked, %d runs with two sessions; the primary stopped and "+
		"the standby was promoted in %s; job %d, submitted at the failover, was ready %s after it began; /readyz %s",
		runs, sessions, live, doubled, promotion.Round(time.Millisecond), firstAfter, recovery.Round(time.Millisecond), readyz)
	t.Log(report)
	if out := os.Getenv("JUICE_FAILOVER_RESULT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(report+"\n"), 0o644))
	}
	require.Zero(t, live, "leaked sessions")
	require.Zero(t, doubled, "runs with two sessions")
	require.Equal(t, jobs, sessions, "one session per job")
}
