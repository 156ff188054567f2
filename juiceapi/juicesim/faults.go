package juicesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Faults are injected into /v1 requests (never into /admin, /metrics or /healthz, so a test can
// always turn them off again). For each request one die roll picks at most one of the rate-based
// faults, in the order listed; Latency is added to every request first.
type Faults struct {
	// DropRate: the connection is closed without an answer, before the request is processed.
	DropRate float64 `json:"dropRate"`
	// HangRate: no answer at all until the client gives up (or the simulator closes).
	HangRate float64 `json:"hangRate"`
	// ErrorRate: HTTP 500 text/plain "simulated fault: ...", before the request is processed.
	ErrorRate float64 `json:"errorRate"`
	// LostResponseRate: the request IS processed, then the connection is closed before the answer.
	// This is the case idempotency keys exist for: a retried POST must not book a second session.
	LostResponseRate float64 `json:"lostResponseRate"`
	// Latency is added to every /v1 request.
	Latency time.Duration `json:"-"`
}

// faultsJSON is the wire form of Faults: the latency as a Go duration string ("250ms").
type faultsJSON struct {
	DropRate         float64  `json:"dropRate"`
	HangRate         float64  `json:"hangRate"`
	ErrorRate        float64  `json:"errorRate"`
	LostResponseRate float64  `json:"lostResponseRate"`
	Latency          Duration `json:"latency"`
}

func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{f.DropRate, f.HangRate, f.ErrorRate, f.LostResponseRate, Duration(f.Latency)})
}

func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*f = Faults{j.DropRate, j.HangRate, j.ErrorRate, j.LostResponseRate, time.Duration(j.Latency)}
	return nil
}

// Validate checks that every rate is a fraction and that together they do not exceed 1.
func (f Faults) Validate() error {
	sum := 0.0
	for name, r := range map[string]float64{"drop rate": f.DropRate, "hang rate": f.HangRate,
		"error rate": f.ErrorRate, "lost response rate": f.LostResponseRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("fault %s %v: want a fraction from 0 to 1", name, r)
		}
		sum += r
	}
	if sum > 1+1e-9 {
		return fmt.Errorf("fault rates add up to %v: at most 1", sum)
	}
	if f.Latency < 0 {
		return fmt.Errorf("fault latency %v is negative", f.Latency)
	}
	return nil
}

type faultKind string

const (
	faultNone     faultKind = ""
	faultDrop     faultKind = "drop"
	faultHang     faultKind = "hang"
	faultError    faultKind = "error"
	faultLost     faultKind = "lost_response"
	faultLatency  faultKind = "latency"
	faultErrorMsg           = "simulated fault: controller temporarily unavailable"
)

// pickFault rolls the die once for a request.
func (s *Sim) pickFault() (faultKind, time.Duration) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	f := s.faults
	r := s.rng.Float64()
	switch {
	case r < f.DropRate:
		return faultDrop, f.Latency
	case r < f.DropRate+f.HangRate:
		return faultHang, f.Latency
	case r < f.DropRate+f.HangRate+f.ErrorRate:
		return faultError, f.Latency
	case r < f.DropRate+f.HangRate+f.ErrorRate+f.LostResponseRate:
		return faultLost, f.Latency
	}
	return faultNone, f.Latency
}

// withFaults wraps a /v1 handler with fault injection.
func (s *Sim) withFaults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, latency := s.pickFault()
		if latency > 0 {
			s.metrics.faults.WithLabelValues(string(faultLatency)).Inc()
			t := time.NewTimer(latency)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			case <-s.done:
				t.Stop()
			}
		}
		if kind != faultNone {
			s.metrics.faults.WithLabelValues(string(kind)).Inc()
		}
		switch kind {
		case faultDrop:
			dropConnection(w)
		case faultHang:
			select {
			case <-r.Context().Done():
			case <-s.done:
			}
			dropConnection(w)
		case faultError:
			legacyError(w, errors.New(faultErrorMsg))
		case faultLost:
			// Process for real, into a buffer that is thrown away with the connection.
			next.ServeHTTP(discardWriter{header: http.Header{}}, r)
			dropConnection(w)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// dropConnection closes the client's connection without writing an answer.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): abort the handler, which resets the stream.
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

type discardWriter struct{ header http.Header }

func (d discardWriter) Header() http.Header         { return d.header }
func (d discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d discardWriter) WriteHeader(int)             {}
