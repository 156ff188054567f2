package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/juice-slurm/juice-slurm/controller"
	"github.com/juice-slurm/juice-slurm/controller/hookapi"
	"github.com/juice-slurm/juice-slurm/controller/jobactor"
	"github.com/juice-slurm/juice-slurm/controller/licenses"
	"github.com/juice-slurm/juice-slurm/internal/backoff"
	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/internal/settings"
	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/session"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
)

// controllerOpts are the controller's settings.
type controllerOpts struct {
	cluster, dbURL, restURL, restUser, restToken, restVersion, juiceURL, juiceToken, keyFile, secretFile *string
	hookListen, holder, policyFile, metricsListen, juicePools, hookCert, hookKey, scontrol, unmunge      *string
	stateDir                                                                                             *string
	poll, waitPoll, window, leaseTTL, sweep, retention, handoffWait                                      *time.Duration
	perPool, perUser, perAccount, workers                                                                *int
	trustComment, juiceIdem, licenses                                                                    *bool
	sacctmgr, capsQOS, hookSocket, hookSocketUsers                                                       *string
	newLog                                                                                               func() (logr.Logger, zap.AtomicLevel, error)
	level                                                                                                *flag.Flag
}

func controllerFlags(fs *flag.FlagSet) *controllerOpts {
	o := &controllerOpts{
		cluster:         fs.String("cluster", "", "Slurm's ClusterName (required)"),
		dbURL:           fs.String("database-url", "", "PostgreSQL URL, e.g. postgres://juice@127.0.0.1:5432/juice (required)"),
		restURL:         fs.String("slurmrestd-url", "http://127.0.0.1:6820", "slurmrestd: http://host:port or unix:///path"),
		restUser:        fs.String("slurm-user", "slurm", "user name of the slurmrestd token (an operator, e.g. SlurmUser)"),
		restToken:       fs.String("slurm-token-file", "", "file holding the slurmrestd JWT, mode 0600, re-read when it changes (required, but for a unix:// slurmrestd-url: rest_auth/local)"),
		restVersion:     fs.String("slurmrest-version", "", "force a slurmrestd API version, e.g. v0.0.38 (default: the newest offered)"),
		juiceURL:        fs.String("juice-url", "http://127.0.0.1:7070", "the Juice Controller (or juice-sim)"),
		juiceToken:      fs.String("juice-token-file", "", "file holding the Juice M2M token, mode 0600 (required)"),
		juicePools:      fs.String("juice-pools", "", "pool names users type, mapped to the Juice Controller's pool ids: name=id,name=id (needed by a controller that knows pools by id only, such as the legacy one; default: looked up with GET /v1/pools)"),
		juiceIdem:       fs.Bool("juice-idempotent", false, "the Juice Controller honours Idempotency-Key (juice-sim does), so a session request whose answer was lost may be retried at once"),
		keyFile:         fs.String("cluster-key", "/etc/juice-slurm/cluster.key", "the cluster key that seals session files (64 hex characters, mode 0600)"),
		secretFile:      fs.String("hook-secret", "/etc/juice-slurm/hook.secret", "the secret the hooks present (mode 0600)"),
		hookListen:      fs.String("hook-listen", "127.0.0.1:7171", "address of the hook API, /healthz and /readyz"),
		hookSocket:      fs.String("hook-socket", "", "also serve the hook API on this Unix socket, for the hooks of a slurmctld on this host (their hook-url = unix:PATH: no TLS handshake); its directory must be this user's or root's and writable by its owner only; empty: off"),
		hookSocketUsers: fs.String("hook-socket-users", "slurm", "users (comma-separated) who may call on --hook-socket besides root and this process's user: SlurmUser, whose slurmctld runs the hooks"),
		hookCert:        fs.String("hook-cert", "/etc/juice-slurm/hook.crt", "the hook API's TLS certificate, which the hooks pin (empty: plain HTTP, which the hooks refuse)"),
		hookKey:         fs.String("hook-key", "/etc/juice-slurm/hook.key", "the hook API's TLS key (mode 0600)"),
		metricsListen:   fs.String("metrics-listen", "", "address of /metrics, /healthz and /readyz (default: the hook API's port + 1000; none: off)"),
		holder:          fs.String("holder", "", "this replica's name in the leader lease (default host:pid)"),
		poll:            fs.Duration("poll-interval", 2*time.Second, "time between two listings of slurmrestd (SIGHUP re-reads it)"),
		waitPoll:        fs.Duration("session-poll", time.Second, "how often a queued session is looked at"),
		handoffWait:     fs.Duration("handoff-wait", reconcile.DefaultHandoffWait, "with hand-off on for a pool (policy pool.<name>.handoff), the longest an ended run's session waits for the same user's next like job"),
		perUser:         fs.Int("lookahead-per-user", reconcile.DefaultLookahead.PerUser, "of those, at most this many pending jobs of one user (0: no cap; SIGHUP re-reads it)"),
		perAccount:      fs.Int("lookahead-per-account", reconcile.DefaultLookahead.PerAccount, "of those, at most this many pending jobs of one Slurm account (0: no cap; SIGHUP re-reads it)"),
		perPool:         fs.Int("lookahead-per-pool", reconcile.DefaultLookahead.PerPool, "pending jobs reserved ahead per pool, by Slurm priority (SIGHUP re-reads it)"),
		window:          fs.Duration("lookahead-window", reconcile.DefaultLookahead.Window, "also reserve pending jobs Slurm expects to start within this time (SIGHUP re-reads it)"),
		trustComment:    fs.Bool("trust-comment", false, "also read requests from the job comment, which its owner can change (default: admin_comment only)"),
		unmunge:         fs.String("unmunge", "/usr/bin/unmunge", "unmunge, which names the user of a 'juice-slurm jobs' call from its MUNGE credential; empty: that call is off"),
		scontrol:        fs.String("scontrol", "/usr/bin/scontrol", "scontrol, to requeue a job whose session was lost (before slurmrestd v0.0.45) and to tell its user why; empty: neither"),
		leaseTTL:        fs.Duration("lease-ttl", 15*time.Second, "leader lease time to live"),
		sweep:           fs.Duration("sweep-interval", 5*time.Minute, "how often to cancel sessions that belong to no live run (negative: never; SIGHUP re-reads it)"),
		workers:         fs.Int("workers", 4, "reconcile workers"),
		retention:       fs.Duration("retention", controller.DefaultRetention, "keep the reservations of ended runs (and their events) this long; longer than the longest job time limit (0: for ever)"),
		stateDir:        fs.String("state-dir", "/var/spool/juice-slurm/sessions", "the shared state directory of session files, where the prologs write them; when it is on the controller's host, the controller removes the files no ready reservation owns (absent: left to the epilog)"),
		policyFile:      fs.String("policy", policy.DefaultPath, "the site's limits on requests, the file job_submit.lua reads too (missing: the grammar's bounds only)"),
		licenses:        switchFlag(fs, "licenses", "on or off: keep each pool's Slurm license juice_<pool>@juice in slurmdbd at what the pool can give this cluster (needs accounting, and JUICE_LICENSES=on in juice-config.sh; the pools are the policy's)"),
		sacctmgr:        fs.String("sacctmgr", "/usr/bin/sacctmgr", "sacctmgr, which writes the licenses' counts (licenses = on)"),
		capsQOS:         fs.String("caps-qos", "", "QOS (comma-separated) on which to keep the policy's max_gpus_per_user as MaxTRESPerUser on the pools' licenses, so Slurm keeps a job over a cap PENDING (licenses = on; needs AccountingStorageEnforce=limits); empty: the caps are the controller's alone"),
	}
	o.newLog = logFlags(fs)
	o.level = fs.Lookup("log-level")
	return o
}

// retentionOf maps --retention to controller.Config.Retention: 0 keeps ended runs for ever.
func retentionOf(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// tuning is what SIGHUP may change (controller.Tuning).
func (o *controllerOpts) tuning() controller.Tuning {
	return controller.Tuning{PollInterval: *o.poll, Lookahead: reconcile.Lookahead{PerPool: *o.perPool, PerUser: *o.perUser, PerAccount: *o.perAccount, Window: *o.window}, Sweep: *o.sweep}
}

func runController(ctx context.Context, args []string) error {
	// SIGHUP re-reads the settings; its default action would end the service.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	fs := flag.NewFlagSet("juice-slurm controller", flag.ContinueOnError)
	o := controllerFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	log, level, err := o.newLog()
	if err != nil {
		return err
	}
	for name, v := range map[string]string{"cluster": *o.cluster, "database-url": *o.dbURL, "juice-token-file": *o.juiceToken} {
		if v == "" {
			return usageError{fmt.Errorf("controller: %s is required (a flag, JUICE_%s or a line in the settings file)",
				name, strings.ToUpper(strings.ReplaceAll(name, "-", "_")))}
		}
	}
	if err := checkSlurmToken(*o.restURL, *o.restToken); err != nil {
		return err
	}
	// Both are read again whenever their files change; a bad one is refused now, at start-up.
	key := session.KeyFile(*o.keyFile)
	// The previous key is checked too: a bad one is never taken for an absent one (the plugin refuses every
	// session then), so it is refused here, loudly, at start-up.
	keys, err := key.All()
	if err != nil {
		return err
	}
	secret := secretfile.New(*o.secretFile, secretfile.MinLength(16))
	if _, err := secret.Value(); err != nil {
		return fmt.Errorf("hook secret: %w", err)
	}
	limits, err := policy.LoadOptional(*o.policyFile)
	if err != nil {
		return err
	}
	keyIDs := make([]string, len(keys))
	for i, k := range keys {
		keyIDs[i] = session.KeyID(k)
	}
	log.Info("cluster key: sealing with the first, session files open under each", "keys", keyIDs)
	if limits == nil {
		log.Info("no site policy file: only the request grammar's bounds apply", "policy", *o.policyFile)
	} else {
		log.Info("site policy", "policy", *o.policyFile, "maxGPUs", limits.MaxGPUs, "maxVRAM", limits.MaxVRAM, "pools", limits.Pools)
	}
	// The state directory is where the prolog writes (the slurmctld host): on another host the epilog alone
	// removes files. Said once, at start, either way.
	stateDir := *o.stateDir
	if fi, err := os.Stat(stateDir); stateDir != "" && err != nil {
		log.Info("the state directory is not on this host: stale session files are removed by the epilog only", "stateDir", stateDir, "error", err.Error())
		stateDir = ""
	} else if stateDir != "" && !fi.IsDir() {
		return fmt.Errorf("--state-dir %s is not a directory", stateDir)
	} else if stateDir != "" {
		log.Info("removing stale session files", "stateDir", stateDir)
	}
	var hookTLS *tls.Config
	if *o.hookCert != "" {
		if hookTLS, err = hookapi.ServerTLS(*o.hookCert, *o.hookKey); err != nil {
			return fmt.Errorf("hook API: %w (deploy/make-secrets.sh makes the certificate and key)", err)
		}
	} else {
		log.Info("WARNING: --hook-cert is empty: the hook API serves plain HTTP, and the hooks refuse to send it their secret")
	}
	pool, err := pgxpool.New(ctx, *o.dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	st := store.New(pool, *o.cluster)
	// The controller runs as a role without DDL rights and never migrates (juice-slurm migrate does, as the owner
	// role). A schema newer than this binary knows is refused at once: it would misread the rows.
	if err := waitFor(ctx, log.WithName("startup"), "PostgreSQL", func(ctx context.Context) error {
		err := st.CheckSchema(ctx)
		if errors.Is(err, store.ErrSchemaNewer) {
			return stopWaiting{err}
		}
		return err
	}); err != nil {
		return err
	}
	tokens := slurmTokens(*o.restToken)
	if tokens == nil {
		log.Info("no slurm-token-file: slurmrestd's unix socket authenticates this process's user (rest_auth/local)", "slurmrestd", *o.restURL)
	}
	slurm, err := slurmrest.New(slurmrest.Config{BaseURL: *o.restURL, UserName: *o.restUser, TokenSource: tokens,
		Version: *o.restVersion, Logger: log.WithName("slurmrest")})
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
	pools, err := juiceapi.ParsePools(*o.juicePools)
	if err != nil {
		return usageError{fmt.Errorf("--juice-pools: %w", err)}
	}
	capsQOS, err := licenses.ParseQOS(*o.capsQOS)
	if err != nil {
		return usageError{fmt.Errorf("--caps-qos: %w", err)}
	}
	if len(capsQOS) > 0 && !*o.licenses {
		return usageError{fmt.Errorf("--caps-qos=%s needs --licenses=on: the caps are limits on the pools' licenses", *o.capsQOS)}
	}
	juice, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: *o.juiceURL, TokenFile: *o.juiceToken, Log: log.WithName("juice"),
		Pools: pools, IdempotentRequests: *o.juiceIdem})
	if err != nil {
		return err
	}
	if *o.holder == "" {
		host, _ := os.Hostname()
		*o.holder = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	socketUIDs, err := uidsOf(*o.hookSocketUsers, *o.hookSocket != "")
	if err != nil {
		return err
	}
	c := &controller.Controller{
		Config: controller.Config{Cluster: *o.cluster, PollInterval: *o.poll, WaitPoll: *o.waitPoll, HandoffWait: *o.handoffWait, Holder: *o.holder,
			Lookahead: reconcile.Lookahead{PerPool: *o.perPool, PerUser: *o.perUser, PerAccount: *o.perAccount, Window: *o.window}, TrustComment: *o.trustComment,
			HookListen: *o.hookListen, HookSocket: *o.hookSocket, HookSocketUIDs: socketUIDs, MetricsListen: *o.metricsListen, Retention: retentionOf(*o.retention), LeaseTTL: *o.leaseTTL, LeaseRenew: *o.leaseTTL / 3, Sweep: *o.sweep, Workers: *o.workers,
			Policy: limits, HookTLS: hookTLS, Unmunge: *o.unmunge, StateDir: stateDir, Licenses: *o.licenses, Sacctmgr: *o.sacctmgr, CapsQOS: capsQOS},
		Store: st, Slurm: slurm, Juice: juice, Key: key, Secret: secret, Log: log, Metrics: controller.NewMetrics(st),
		Ender: &jobactor.SlurmEnder{Rest: slurm, Scontrol: *o.scontrol},
	}
	c.Metrics.SetVersion(Version)
	if tokens != nil {
		c.Metrics.WatchTokenExpiry("slurmrestd", func() (string, error) {
			tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return tokens.Token(tctx)
		})
	}
	juiceTok := secretfile.New(*o.juiceToken, nil)
	c.Metrics.WatchTokenExpiry("juice", juiceTok.Value)
	// Say at start-up when the slurmrestd token runs out: one that is not renewed stops every poll then.
	if tokens != nil {
		if tok, err := tokens.Token(ctx); err == nil {
			if warn, msg, kv := tokenExpiryNote(tok, time.Now()); warn {
				log.Info("WARNING: "+msg, kv...)
			} else if msg != "" {
				log.Info(msg, kv...)
			}
		}
	}
	was := map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { was[f.Name] = f.Value.String() })
	go retuneOnHangup(ctx, hup, c, args, was, level, log)
	return c.Run(ctx)
}

// slurmTokens is where the slurmrestd token comes from: the slurm-token-file, the one source; none over a unix
// socket without one (slurmrestd's rest_auth/local names the caller from the socket). checkSlurmToken has
// refused every other setting without a file.
func slurmTokens(tokenFile string) slurmrest.TokenSource {
	if tokenFile == "" {
		return nil
	}
	return slurmrest.FileToken(tokenFile)
}

// checkSlurmToken refuses, at start, a controller whose every poll would fail for want of a slurmrestd token:
// slurmrestd over TCP takes a JWT, and only slurm-token-file gives one. The file must be readable now (it is
// read again whenever it changes, so renewing it needs no restart).
func checkSlurmToken(restURL, tokenFile string) error {
	if tokenFile == "" {
		if strings.HasPrefix(restURL, "unix://") {
			return nil
		}
		return usageError{fmt.Errorf("controller: slurm-token-file is required: slurmrestd at %s takes a JWT "+
			"(scontrol token username=slurm; deploy/juice-slurm-token-renew keeps the file fresh), unless slurmrestd-url "+
			"is a unix:// socket, where rest_auth/local needs none", restURL)}
	}
	if _, err := slurmrest.FileToken(tokenFile).Token(context.Background()); err != nil {
		return fmt.Errorf("controller: slurm-token-file: %w (deploy/juice-slurm-token-renew writes it)", err)
	}
	return nil
}

// tokenExpiryNote says when a slurmrestd token expires: warn for one that has expired or expires within the hour
// (a renewal every 8 hours for a day's lifespan leaves 16 hours at worst). msg is "" for a token without an
// expiry.
func tokenExpiryNote(tok string, now time.Time) (warn bool, msg string, kv []any) {
	exp, ok := slurmrest.JWTExpiry(tok)
	if !ok {
		return false, "", nil
	}
	left := exp.Sub(now).Round(time.Second)
	kv = []any{"expires", exp.UTC().Format(time.RFC3339), "in", left.String()}
	switch {
	case left <= 0:
		return true, "the slurmrestd token has expired: every poll fails until the token file is renewed (deploy/juice-slurm-token-renew)", kv
	case left < time.Hour:
		return true, "the slurmrestd token expires within the hour: renew the token file (deploy/juice-slurm-token-renew) or every poll fails then", kv
	}
	return false, "slurmrestd token", kv
}

// onRetune is told of every retune (tests).
var onRetune = func(controller.Tuning, zapcore.Level) {}

// retunable are the settings SIGHUP applies (controller.Tuning, and the log level).
var retunable = map[string]bool{"poll-interval": true, "lookahead-per-pool": true, "lookahead-per-user": true, "lookahead-per-account": true, "lookahead-window": true,
	"sweep-interval": true, "log-level": true, "config": true}

// retuneOnHangup re-reads the settings on every SIGHUP and hands what may change at run time to the controller;
// a setting that takes a restart is named in the log, and a bad file leaves everything as it was.
func retuneOnHangup(ctx context.Context, hup <-chan os.Signal, c *controller.Controller, args []string, was map[string]string,
	level zap.AtomicLevel, log logr.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		fs := flag.NewFlagSet("juice-slurm controller", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		now := controllerFlags(fs)
		if err := parseFlags(fs, args); err != nil {
			log.Error(err, "SIGHUP: the settings do not parse; nothing changed")
			continue
		}
		l, err := parseLevel(now.level.Value.String())
		if err != nil {
			log.Error(err, "SIGHUP: nothing changed")
			continue
		}
		if err := c.Retune(now.tuning()); err != nil {
			log.Error(err, "SIGHUP: nothing changed")
			continue
		}
		level.SetLevel(l)
		onRetune(now.tuning(), l)
		fs.VisitAll(func(f *flag.Flag) {
			if v, w := f.Value.String(), was[f.Name]; v != w && !retunable[f.Name] {
				log.Info("SIGHUP: this setting changes at the next restart only", "setting", f.Name, "running", redact(w), "read", redact(v))
			}
		})
		log.Info("SIGHUP: settings re-read", "logLevel", l.String())
	}
}

// startupRetry paces the start-up's attempts to reach a service.
var startupRetry = backoff.Policy{Base: 500 * time.Millisecond, Max: 5 * time.Second}

// stopWaiting is an error that waiting cannot cure: waitFor returns it at once.
type stopWaiting struct{ error }

func (e stopWaiting) Unwrap() error { return e.error }

// waitFor retries f until it succeeds, fails with stopWaiting, or ctx ends, saying every few seconds what it waits
// for.
func waitFor(ctx context.Context, log interface {
	Info(string, ...any)
}, what string, f func(context.Context) error) error {
	start := time.Now()
	var last error
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		if errors.As(err, new(stopWaiting)) {
			return err
		}
		if ctx.Err() != nil {
			// The attempt that ctx's end cut short says less than the one before it.
			if last == nil {
				last = err
			}
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), last)
		}
		last = err
		log.Info("waiting for "+what, "waited", time.Since(start).Round(time.Second).String(), "error", err.Error())
		_ = startupRetry.Sleep(ctx, attempt)
	}
}

// uidsOf looks up the uids of a comma-separated list of user names (none when the hook socket is off: the names
// then need not exist here).
func uidsOf(names string, on bool) ([]uint32, error) {
	if !on {
		return nil, nil
	}
	var uids []uint32
	for _, name := range strings.Split(names, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		u, err := user.Lookup(name)
		if err != nil {
			return nil, settings.UsageError{Err: fmt.Errorf("--hook-socket-users: %w", err)}
		}
		uid, err := strconv.ParseUint(u.Uid, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("--hook-socket-users: user %s has uid %q", name, u.Uid)
		}
		uids = append(uids, uint32(uid))
	}
	return uids, nil
}
