package juiceapi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	"github.com/google/uuid"

	"github.com/juice-slurm/juice-slurm/juiceapi"
	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

func TestTokenFileRefused(t *testing.T) {
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644, 0o660, 0o606, 0o620} {
		path := writeToken(t, dir, testToken, mode)
		_, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: "http://127.0.0.1:1", TokenFile: path})
		if err == nil {
			t.Fatalf("mode %04o accepted", mode)
		}
		msg := err.Error()
		if !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("%04o", mode)) || !strings.Contains(msg, "group and others") {
			t.Errorf("mode %04o: message %q should name the path, the mode and why", mode, msg)
		}
		if strings.Contains(msg, testToken) {
			t.Fatalf("token in error: %q", msg)
		}
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		if _, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: "http://127.0.0.1:1", TokenFile: writeToken(t, dir, testToken, mode)}); err != nil {
			t.Errorf("mode %04o refused: %v", mode, err)
		}
	}

	for name, content := range map[string]string{"empty": "\n", "two words": testToken + " extra", "two lines": testToken + "\nmore"} {
		path := filepath.Join(dir, "bad")
		_ = os.WriteFile(path, []byte(content), 0o600)
		_, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: "http://127.0.0.1:1", TokenFile: path})
		if err == nil || strings.Contains(err.Error(), testToken) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: "http://127.0.0.1:1", TokenFile: filepath.Join(dir, "missing")}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := juiceapi.NewHTTPClient(juiceapi.HTTPConfig{BaseURL: "http://127.0.0.1:1"}); err == nil {
		t.Error("no token file accepted")
	}
}

// TestTokenFileLoosenedLater: a file whose mode is loosened after start-up is refused at the next
// call, with an error that is not retried and does not hold the token.
func TestTokenFileLoosenedLater(t *testing.T) {
	e := start(t, juicesim.Config{}, nil)
	if err := os.Chmod(e.tokenPath, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Status(context.Background())
	if !errors.Is(err, juiceapi.ErrUnauthorized) || !strings.Contains(err.Error(), "0644") || strings.Contains(err.Error(), testToken) {
		t.Fatalf("got %v", err)
	}
}

// TestTokenRotation: the file is re-read when it changes, whether replaced (rename) or rewritten.
func TestTokenRotation(t *testing.T) {
	e := start(t, juicesim.Config{}, nil)
	ctx := context.Background()
	if _, err := e.client.Status(ctx); err != nil {
		t.Fatal(err)
	}
	// Atomic replacement, as Kubernetes secrets and `mv` do.
	e.sim.SetToken("m2m_second")
	tmp := e.tokenPath + ".new"
	_ = os.WriteFile(tmp, []byte("m2m_second\n"), 0o600)
	if err := os.Rename(tmp, e.tokenPath); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Status(ctx); err != nil {
		t.Fatalf("after rename: %v", err)
	}
	// In-place rewrite, a different length so the change is seen even within one mtime tick.
	e.sim.SetToken("m2m_third_longer")
	if err := os.WriteFile(e.tokenPath, []byte("m2m_third_longer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Status(ctx); err != nil {
		t.Fatalf("after rewrite: %v", err)
	}
	// The controller rotated but the file did not: unauthorized, not retried.
	e.sim.SetToken("m2m_fourth")
	if _, err := e.client.Status(ctx); !errors.Is(err, juiceapi.ErrUnauthorized) || strings.Contains(err.Error(), "m2m_third_longer") {
		t.Fatalf("stale token: %v", err)
	}
}

// TestTokenNeverLogged runs failing calls with retries at full verbosity and checks the log.
func TestTokenNeverLogged(t *testing.T) {
	var mu sync.Mutex
	var logs strings.Builder
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		logs.WriteString(prefix + args + "\n")
		mu.Unlock()
	}, funcr.Options{Verbosity: 10})
	e := start(t, juicesim.Config{Faults: juicesim.Faults{ErrorRate: 1}}, func(h *juiceapi.HTTPConfig) { h.Log = log })
	ctx := context.Background()
	_, err1 := e.client.RequestSession(ctx, uuid.New(), juiceapi.SessionRequest{PoolID: "test", GPUs: 1})
	_, err2 := e.client.GetSession(ctx, "x")
	for _, err := range []error{err1, err2} {
		if err == nil || strings.Contains(err.Error(), testToken) {
			t.Fatalf("error %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "retrying") {
		t.Fatalf("no retries logged:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), testToken) {
		t.Fatalf("token in logs:\n%s", logs.String())
	}
}
