// Command juice-sim runs a simulated Juice Controller (legacy REST API), so juice-slurm can be tried
// and tested without a real GPU pool.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/juice-slurm/juice-slurm/internal/secretfile"
	"github.com/juice-slurm/juice-slurm/internal/vram"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "juice-sim:", err)
		os.Exit(2)
	}
}

// options are the command line; see newFlags for their meaning and defaults.
type options struct {
	listen, tokenFile, configFile, logFormat string
	insecureNoAuth                           bool
	verbosity                                int

	pools, vram, profile string
	agents, gpus         int

	tick, assignDelay, activateDelay, cancelDelay, agentTimeout time.Duration

	faultError, faultDrop, faultHang, faultLost float64
	faultLatency                                time.Duration
	seed                                        uint64
}

func newFlags(out io.Writer) (*flag.FlagSet, *options) {
	o := &options{}
	tick, assign, activate, cancel, agentTimeout := juicesim.DefaultTiming()
	fs := flag.NewFlagSet("juice-sim", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7070", "address to serve the controller API, /admin and /metrics on")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the M2M token clients must send as \"Authorization: Bearer <token>\" (mode 0600; re-read on SIGHUP); required unless --insecure-no-auth")
	fs.BoolVar(&o.insecureNoAuth, "insecure-no-auth", false, "accept requests without a token (local demos only)")
	fs.StringVar(&o.configFile, "config", "", "JSON config file with pools, agents, timing and faults (replaces --pools/--agents/--gpus/--vram; flags given explicitly override its timing and faults)")
	fs.StringVar(&o.pools, "pools", "test", "comma-separated pool ids, each with --agents agents (ignored with --config)")
	fs.IntVar(&o.agents, "agents", 4, "agents per pool")
	fs.IntVar(&o.gpus, "gpus", 8, "GPUs per agent")
	fs.StringVar(&o.vram, "vram", "80GiB", "VRAM per GPU (B, MB, GB, MiB, GiB; a bare number is GiB)")
	fs.DurationVar(&o.tick, "tick", tick, "scheduler interval (legacy 1s); 0 schedules on every request")
	fs.DurationVar(&o.assignDelay, "assign-delay", assign, "least time a session stays queued before it may be assigned")
	fs.DurationVar(&o.activateDelay, "activate-delay", activate, "time from assigned to active")
	fs.DurationVar(&o.cancelDelay, "cancel-delay", cancel, "time from canceling to closed")
	fs.DurationVar(&o.agentTimeout, "agent-timeout", agentTimeout, "agents registered through the API without a heartbeat for this long go missing (0 = never)")
	fs.Float64Var(&o.faultError, "fault-error-rate", 0, "fraction of /v1 requests answered 500 \"simulated fault\"")
	fs.Float64Var(&o.faultDrop, "fault-drop-rate", 0, "fraction of /v1 requests whose connection is closed unanswered, unprocessed")
	fs.Float64Var(&o.faultHang, "fault-hang-rate", 0, "fraction of /v1 requests never answered (until the client gives up)")
	fs.Float64Var(&o.faultLost, "fault-lost-response-rate", 0, "fraction of /v1 requests processed, then the connection closed before the answer")
	fs.DurationVar(&o.faultLatency, "fault-latency", 0, "latency added to every /v1 request")
	fs.StringVar(&o.profile, "profile", "", "behave like a named controller: \"legacy\" switches on every known behaviour of the 2023 open-source controller (no idempotency, no session listing, pools by UUID, ...; juiceapi/README.md)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the fault dice (0 = random)")
	fs.StringVar(&o.logFormat, "log-format", "console", "log format: json or console")
	fs.IntVar(&o.verbosity, "v", 0, "log verbosity (0 = state changes, 1 = more)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `Usage: juice-sim [flags]

Simulates the Juice Controller's legacy REST API (/v1/...), with an admin API (/admin/sessions,
/admin/faults, /admin/agents/{id}, /admin/step, /admin/check) and Prometheus metrics (/metrics).

Example: 2 pools of 4 agents x 8 GPUs x 80 GiB:
  (umask 077; echo m2m_demo >token) && juice-sim --token-file token --pools test,demo

Flags:
`)
		printFlags(fs)
	}
	return fs, o
}

// printFlags lists every flag with its description and default, zero defaults included.
func printFlags(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		kind, usage := flag.UnquoteUsage(f)
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(fs.Output(), "  --%s %s\n      %s (default %s)\n", f.Name, kind, usage, def)
	})
}

func run(args []string, stderr io.Writer) error {
	fs, o := newFlags(stderr)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (see --help)", fs.Args())
	}
	log, err := newLogger(o.logFormat, o.verbosity)
	if err != nil {
		return err
	}
	cfg, err := buildConfig(fs, o)
	if err != nil {
		return err
	}
	srv, err := juicesim.StartServer(cfg, log)
	if err != nil {
		return err
	}
	log.Info("juice-sim listening", "url", srv.URL, "pools", poolSummary(cfg), "tick", cfg.Tick.String(),
		"auth", cfg.Token != "")

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Wait() }()
	for {
		select {
		case err := <-stopped:
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				reloadToken(o, srv.Sim, log)
				continue
			}
			log.Info("shutting down", "signal", sig.String())
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := srv.Shutdown(ctx)
			cancel()
			return err
		}
	}
}

// buildConfig layers the defaults, the config file, then flags given explicitly.
func buildConfig(fs *flag.FlagSet, o *options) (juicesim.Config, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := juicesim.Config{Listen: o.listen, Seed: o.seed}
	cfg.Tick, cfg.AssignDelay, cfg.ActivateDelay, cfg.CancelDelay, cfg.AgentTimeout = juicesim.DefaultTiming()
	if o.configFile != "" {
		for _, name := range []string{"pools", "agents", "gpus", "vram"} {
			if set[name] {
				return cfg, fmt.Errorf("--%s cannot be combined with --config (the file defines the pools)", name)
			}
		}
		if err := juicesim.LoadConfigFile(o.configFile, &cfg); err != nil {
			return cfg, err
		}
	} else {
		vram, err := vram.Parse(o.vram)
		if err != nil {
			return cfg, fmt.Errorf("--vram: %w", err)
		}
		if o.agents < 1 || o.gpus < 1 {
			return cfg, fmt.Errorf("--agents %d --gpus %d: want at least 1 of each", o.agents, o.gpus)
		}
		for _, id := range strings.Split(o.pools, ",") {
			if id = strings.TrimSpace(id); id != "" {
				cfg.Pools = append(cfg.Pools, juicesim.UniformPool(id, o.agents, o.gpus, vram))
			}
		}
		if len(cfg.Pools) == 0 {
			return cfg, errors.New("--pools: no pool given")
		}
	}
	if set["profile"] || o.configFile == "" {
		l, err := juicesim.Profile(o.profile)
		if err != nil {
			return cfg, fmt.Errorf("--profile: %w", err)
		}
		cfg.Legacy = l
	}
	override := func(name string, dst *time.Duration, v time.Duration) {
		if set[name] || o.configFile == "" {
			*dst = v
		}
	}
	override("tick", &cfg.Tick, o.tick)
	override("assign-delay", &cfg.AssignDelay, o.assignDelay)
	override("activate-delay", &cfg.ActivateDelay, o.activateDelay)
	override("cancel-delay", &cfg.CancelDelay, o.cancelDelay)
	override("agent-timeout", &cfg.AgentTimeout, o.agentTimeout)
	overrideRate := func(name string, dst *float64, v float64) {
		if set[name] || o.configFile == "" {
			*dst = v
		}
	}
	overrideRate("fault-error-rate", &cfg.Faults.ErrorRate, o.faultError)
	overrideRate("fault-drop-rate", &cfg.Faults.DropRate, o.faultDrop)
	overrideRate("fault-hang-rate", &cfg.Faults.HangRate, o.faultHang)
	overrideRate("fault-lost-response-rate", &cfg.Faults.LostResponseRate, o.faultLost)
	override("fault-latency", &cfg.Faults.Latency, o.faultLatency)

	switch {
	case o.tokenFile != "" && o.insecureNoAuth:
		return cfg, errors.New("--token-file and --insecure-no-auth exclude each other")
	case o.tokenFile != "":
		tok, err := secretfile.Load(o.tokenFile, nil)
		if err != nil {
			return cfg, err
		}
		cfg.Token = tok
	case !o.insecureNoAuth:
		return cfg, errors.New("--token-file is required (or --insecure-no-auth for a local demo)")
	}
	return cfg, cfg.Validate()
}

// reloadToken re-reads the token file on SIGHUP, to try token rotation end to end.
func reloadToken(o *options, sim *juicesim.Sim, log logr.Logger) {
	if o.tokenFile == "" {
		log.Info("SIGHUP ignored: no --token-file")
		return
	}
	tok, err := secretfile.Load(o.tokenFile, nil)
	if err != nil {
		log.Error(err, "token not reloaded; the old one stays in force")
		return
	}
	sim.SetToken(tok)
	log.Info("token reloaded", "file", o.tokenFile)
}

func poolSummary(cfg juicesim.Config) []string {
	var out []string
	for _, p := range cfg.Pools {
		gpus := 0
		for _, a := range p.Agents {
			gpus += len(a.GPUs)
		}
		out = append(out, fmt.Sprintf("%s (%d agents, %d GPUs)", p.ID, len(p.Agents), gpus))
	}
	return out
}

func newLogger(format string, verbosity int) (logr.Logger, error) {
	var zc zap.Config
	switch format {
	case "json":
		zc = zap.NewProductionConfig()
	case "console":
		zc = zap.NewDevelopmentConfig()
		zc.DisableStacktrace = true
	default:
		return logr.Logger{}, fmt.Errorf("--log-format %q: want json or console", format)
	}
	zc.Level = zap.NewAtomicLevelAt(zapcore.Level(-verbosity))
	zl, err := zc.Build()
	if err != nil {
		return logr.Logger{}, fmt.Errorf("logger: %w", err)
	}
	return zapr.NewLogger(zl), nil
}
