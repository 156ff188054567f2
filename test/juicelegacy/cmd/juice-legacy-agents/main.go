// Command juice-legacy-agents runs emulated GPU hosts against the legacy Juice controller (package
// test/juicelegacy/agentemu), with an admin API on loopback. Standard library only.
//
//	juice-legacy-agents -config agents.json [-pool-ids pools.json] [-controller 127.0.0.1:8480] [-token-file F] [-admin 127.0.0.1:8482]
//	juice-legacy-agents -controller 127.0.0.1:8480 -token-file F -pool UUID -agents 2 -gpus 4 -vram 24GiB
//
// Flags override the configuration file. SIGTERM or SIGINT closes every running agent (PUT state "closed"), as the
// real agents do when they stop.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/juice-slurm/juice-slurm/test/juicelegacy/agentemu"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "juice-legacy-agents:", err)
		os.Exit(1)
	}
}

func run() error {
	configPath := flag.String("config", "", "configuration file (JSON, see package agentemu)")
	poolIDs := flag.String("pool-ids", "", `JSON file {"pool name": "pool UUID"} merged into the configuration's pools`)
	controller := flag.String("controller", "", "controller host:port (https first, then http, as the real agent) or URL")
	tokenFile := flag.String("token-file", "", "file with the bearer token (JWT)")
	admin := flag.String("admin", "", "loopback address of the admin API (default 127.0.0.1:8482)")
	pool := flag.String("pool", "", "without -config: the pool (UUID, or a name of -pool-ids)")
	agents := flag.Int("agents", 2, "without -config: how many agents")
	gpus := flag.Int("gpus", 4, "without -config: GPUs per agent")
	vram := flag.String("vram", "24GiB", "without -config: VRAM per GPU")
	readWhole := flag.Bool("read-whole-body", false, "read response bodies fully (the real agent reads them with one Read and fails past about 4 KB)")
	keepGoing := flag.Bool("keep-going", false, "carry on where the real agent exits (failed requests, cancel of an unknown session)")
	flag.Parse()

	var cfg agentemu.Config
	if *configPath != "" {
		var err error
		if cfg, err = agentemu.LoadConfig(*configPath); err != nil {
			return err
		}
	} else {
		size, err := agentemu.ParseSize(*vram)
		if err != nil {
			return err
		}
		if *pool == "" {
			return errors.New("-pool is required without -config")
		}
		cfg.Agents = []agentemu.AgentConfig{{Name: "emu", Count: *agents, Pool: *pool, GPUs: *gpus, VRAM: size}}
	}
	if *poolIDs != "" {
		b, err := os.ReadFile(*poolIDs)
		if err != nil {
			return err
		}
		m := map[string]string{}
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("%s: %w", *poolIDs, err)
		}
		if cfg.Pools == nil {
			cfg.Pools = map[string]string{}
		}
		for k, v := range m {
			cfg.Pools[k] = v
		}
	}
	if *controller != "" {
		cfg.Controller = *controller
	}
	if *tokenFile != "" {
		cfg.TokenFile = *tokenFile
	}
	if *admin != "" {
		cfg.Admin = *admin
	}
	if cfg.Admin == "" {
		cfg.Admin = "127.0.0.1:8482"
	}
	cfg.ReadWholeBody = cfg.ReadWholeBody || *readWhole
	cfg.KeepGoing = cfg.KeepGoing || *keepGoing

	logger := log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds)
	emu, err := agentemu.New(cfg, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Admin)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: emu.AdminHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("admin API: %v", err)
		}
	}()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	logger.Printf("%d agents for controller %s; admin API on http://%s", len(emu.Agents()), cfg.Controller, cfg.Admin)
	emu.Start(context.Background())
	<-ctx.Done()
	logger.Printf("shutting down: closing the agents")
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	emu.Shutdown(sctx)
	_ = srv.Shutdown(sctx)
	logger.Printf("stopped")
	return nil
}
