package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

func runController(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("juice-slurm controller", flag.ContinueOnError)
	var (
		cluster      = fs.String("cluster", "", "Slurm's ClusterName (required)")
		dbURL        = fs.String("database-url", "", "PostgreSQL URL, e.g. postgres://juice@127.0.0.1:5432/juice (required)")
		restURL      = fs.String("slurmrestd-url", "http://127.0.0.1:6820", "slurmrestd: http://host:port or unix:///path")
		restUser     = fs.String("slurm-user", "slurm", "user name of the slurmrestd token (an operator, e.g. SlurmUser)")
		restToken    = fs.String("slurm-token-file", "", "file holding the slurmrestd JWT, re-read when it changes")
		restVersion  = fs.String("slurmrest-version", "", "force a slurmrestd API version, e.g. v0.0.38 (default: the newest offered)")
		juiceURL     = fs.String("juice-url", "http://127.0.0.1:7070", "the Juice Controller (or juice-sim)")
		juiceToken   = fs.String("juice-token-file", "", "file holding the Juice M2M token, mode 0600 (required)")
		keyFile      = fs.String("cluster-key", "/etc/juice-slurm/cluster.key", "the cluster key that seals session files (64 hex characters, mode 0600)")
		secretFile   = fs.String("hook-secret", "/etc/juice-slurm/hook.secret", "the secret the hooks present (mode 0600)")
		hookListen   = fs.String("hook-listen", "127.0.0.1:7171", "address of the hook API, /healthz, /readyz and /metrics")
		holder       = fs.String("holder", "", "this replica's name in the leader lease (default host:pid)")
		poll         = fs.Duration("poll-interval", 2*time.Second, "time between two listings of slurmrestd")
		waitPoll     = fs.Duration("session-poll", time.Second, "how often a queued session is looked at")
		perPool      = fs.Int("lookahead-per-pool", reconcile.DefaultLookahead.PerPool, "pending jobs reserved ahead per pool, by Slurm priority")
		window       = fs.Duration("lookahead-window", reconcile.DefaultLookahead.Window, "also reserve pending jobs Slurm expects to start within this time")
		trustComment = fs.Bool("trust-comment", false, "also read requests from the job comment, which its owner can change (default: admin_comment only)")
		leaseTTL     = fs.Duration("lease-ttl", 15*time.Second, "leader lease time to live")
		sweep        = fs.Duration("sweep-interval", 5*time.Minute, "how often to cancel sessions that belong to no live run (negative: never)")
		workers      = fs.Int("workers", 4, "reconcile workers")
		policyFile   = fs.String("policy", policy.DefaultPath, "the site's limits on requests, the file job_submit.lua reads too (missing: the grammar's bounds only)")
	)
	newLog := logFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, err := newLog()
	if err != nil {
		return err
	}
	for name, v := range map[string]string{"cluster": *cluster, "database-url": *dbURL, "juice-token-file": *juiceToken} {
		if v == "" {
			return fmt.Errorf("controller: --%s is required", name)
		}
	}
	// Both are read again whenever their files change; a bad one is refused now, at start-up.
	key := session.KeyFile(*keyFile)
	if _, err := key.Bytes(); err != nil {
		return err
	}
	secret := secretfile.New(*secretFile, secretfile.MinLength(16))
	if _, err := secret.Value(); err != nil {
		return fmt.Errorf("hook secret: %w", err)
	}
	limits, err := policy.LoadOptional(*policyFile)
	if err != nil {
		return err
	}
	if limits == nil {
		log.Info("no site policy file: only the request grammar's bounds apply", "policy", *policyFile)
	} else {
		log.Info("site policy", "policy", *policyFile, "maxGPUs", limits.MaxGPUs, "maxVRAM", limits.MaxVRAM, "pools", limits.Pools)
	}
	pool, err := pgxpool.New(ctx, *dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	st := store.New(pool, *cluster)
	if err := waitFor(ctx, log.WithName("startup"), "PostgreSQL", st.Migrate); err != nil {
		return err
	}
	var tokens slurmrest.TokenSource
	if *restToken != "" {
		tokens = slurmrest.FileToken(*restToken)
	} else {
		tokens = slurmrest.EnvToken("JUICE_SLURM_TOKEN")
	}
	slurm, err := slurmrest.New(slurmrest.Config{BaseURL: *restURL, UserName: *restUser, TokenSource: tokens,
		Version: *restVersion, Logger: log.WithName("slurmrest")})
	if err != nil {
		return err
	}
	// slurmrestd being down must not keep the hook API down: prologs are served from PostgreSQL alone. So the
	// version is negotiated here if slurmrestd answers, and otherwise at the first poll that reaches it.
	nctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if v, err := slurm.Negotiate(nctx); err != nil {
		log.Error(err, "slurmrestd does not answer yet; starting anyway, polls retry")
	} else {
		log.Info("slurmrestd API version", "version", v)
	}
	cancel()
	juice, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: *juiceURL, TokenFile: *juiceToken, Log: log.WithName("juice")})
	if err != nil {
		return err
	}
	if *holder == "" {
		host, _ := os.Hostname()
		*holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	c := &controller.Controller{
		Config: controller.Config{Cluster: *cluster, PollInterval: *poll, WaitPoll: *waitPoll, Holder: *holder,
			Lookahead: reconcile.Lookahead{PerPool: *perPool, Window: *window}, TrustComment: *trustComment,
			HookListen: *hookListen, LeaseTTL: *leaseTTL, LeaseRenew: *leaseTTL / 3, Sweep: *sweep, Workers: *workers,
			Policy: limits},
		Store: st, Slurm: slurm, Juice: juice, Key: key, Secret: secret, Log: log,
	}
	return c.Run(ctx)
}

// startupRetry paces the start-up's attempts to reach a service.
var startupRetry = backoff.Policy{Base: 500 * time.Millisecond, Max: 5 * time.Second}

// waitFor retries f until it succeeds or ctx ends, saying every few seconds what it waits for.
func waitFor(ctx context.Context, log interface {
	Info(string, ...any)
}, what string, f func(context.Context) error) error {
	start := time.Now()
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
		}
		log.Info("waiting for "+what, "waited", time.Since(start).Round(time.Second).String(), "error", err.Error())
		_ = startupRetry.Sleep(ctx, attempt)
	}
}
