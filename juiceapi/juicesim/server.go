package juicesim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
)

// Server is a simulator serving on a real TCP listener: from a test, or from cmd/juice-sim.
type Server struct {
	URL string // e.g. "http://127.0.0.1:41234"
	Sim *Sim

	srv      *http.Server
	ln       net.Listener
	served   chan struct{} // closed when Serve returned
	serveErr error
}

// StartServer builds a simulator and serves it on cfg.Listen (default 127.0.0.1:0, a free port).
// The server runs until Close or Shutdown.
//
//	srv, err := juicesim.StartServer(juicesim.Config{Pools: []juicesim.PoolConfig{
//		juicesim.UniformPool("test", 4, 8, 80*vram.GiB)}, Token: "m2m_test"}, logr.Discard())
//	defer srv.Close()
//	// point juiceapi.HTTPConfig.BaseURL at srv.URL
func StartServer(cfg Config, log logr.Logger) (*Server, error) {
	sim, err := New(cfg, log)
	if err != nil {
		return nil, err
	}
	addr := cfg.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		sim.Close()
		return nil, fmt.Errorf("juice-sim listen on %s: %w", addr, err)
	}
	s := &Server{
		URL: "http://" + ln.Addr().String(),
		Sim: sim,
		srv: &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second},
		ln:  ln, served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops at once: hung requests are released and connections closed.
func (s *Server) Close() error {
	s.Sim.Close()
	err := s.srv.Close()
	<-s.served
	return err
}

// Shutdown stops gracefully: no new connections, running requests finish (hung ones are released
// first), then the scheduler stops.
func (s *Server) Shutdown(ctx context.Context) error {
	s.Sim.Close()
	if err := s.srv.Shutdown(ctx); err != nil {
		return err
	}
	<-s.served
	return s.serveErr
}

// Wait returns when the server stopped serving, with the reason (nil after Close or Shutdown).
func (s *Server) Wait() error {
	<-s.served
	return s.serveErr
}
