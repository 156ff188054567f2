package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/juice-slurm/juice-slurm/internal/vram"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	fs, _ := newFlags(io.Discard)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if strings.TrimSpace(f.Usage) == "" {
			t.Errorf("--%s has no description", f.Name)
		}
		if !strings.Contains(out.String(), "--"+f.Name+" ") {
			t.Errorf("--%s missing from --help", f.Name)
		}
	})
	if got := strings.Count(out.String(), "(default "); got != n {
		t.Errorf("%d defaults shown for %d flags:\n%s", got, n, out.String())
	}
}

func parse(t *testing.T, args ...string) (*flag.FlagSet, *options) {
	t.Helper()
	fs, o := newFlags(io.Discard)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs, o
}

func TestBuildConfig(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	_ = os.WriteFile(token, []byte("m2m_cmd_test\n"), 0o600)

	cfg, err := buildConfig(parse(t, "--token-file", token, "--pools", "test,demo", "--agents", "2", "--gpus", "4", "--vram", "24GiB", "--tick", "0s"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != "m2m_cmd_test" || len(cfg.Pools) != 2 || len(cfg.Pools[1].Agents) != 2 ||
		len(cfg.Pools[1].Agents[0].GPUs) != 4 || cfg.Pools[0].Agents[0].GPUs[0].VRAM != 24*vram.GiB || cfg.Tick != 0 ||
		cfg.ActivateDelay != time.Second || cfg.Listen != "127.0.0.1:7070" {
		t.Errorf("config: %+v", cfg)
	}

	file := filepath.Join(dir, "sim.json")
	_ = os.WriteFile(file, []byte(`{"tick":"2s","activateDelay":"3s","pools":[{"id":"f","agents":[{"gpus":1,"vram":"8"}]}]}`), 0o644)
	cfg, err = buildConfig(parse(t, "--insecure-no-auth", "--config", file, "--tick", "100ms"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tick != 100*time.Millisecond || cfg.ActivateDelay != 3*time.Second || cfg.Pools[0].ID != "f" || cfg.Token != "" {
		t.Errorf("flags over file: %+v", cfg)
	}

	loose := filepath.Join(dir, "loose")
	_ = os.WriteFile(loose, []byte("m2m_loose\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--token-file is required"},
		{[]string{"--token-file", token, "--insecure-no-auth"}, "exclude each other"},
		{[]string{"--token-file", loose}, "0644"},
		{[]string{"--insecure-no-auth", "--vram", "1.5xyz"}, `invalid VRAM size "1.5xyz"`},
		{[]string{"--insecure-no-auth", "--config", file, "--gpus", "2"}, "--gpus cannot be combined with --config"},
		{[]string{"--insecure-no-auth", "--pools", ","}, "no pool"},
		{[]string{"--insecure-no-auth", "--fault-error-rate", "1.5"}, "error rate 1.5"},
	} {
		_, err := buildConfig(parse(t, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "m2m_loose") {
			t.Errorf("token in error %q", err)
		}
	}
}
