package juicesim

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/juice-slurm/juice-slurm/test/fakeclock"
)

// newFakeClock is a settable clock for Config.Now.
func newFakeClock() *fakeclock.Clock {
	return fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

func newSim(t testing.TB, cfg Config) *Sim {
	t.Helper()
	var log logr.Logger = logr.Discard()
	if tt, ok := t.(*testing.T); ok && testing.Verbose() {
		log = testr.New(tt)
	}
	s, err := New(cfg, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
