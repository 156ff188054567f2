package juicesim

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/juice-slurm/juice-slurm/juiceapi"
)

// metrics live in the simulator's own registry, so several simulators (and the code under test)
// can run in one process without colliding on the global default registry.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	faults   *prometheus.CounterVec
}

var (
	descSessions = prometheus.NewDesc("juice_sim_sessions", "Sessions by pool and state (closed ones included).",
		[]string{"pool", "state"}, nil)
	descAgents = prometheus.NewDesc("juice_sim_agents", "Agents by pool and state.", []string{"pool", "state"}, nil)
	descGPUs   = prometheus.NewDesc("juice_sim_gpus", "GPUs of the pool's agents.", []string{"pool"}, nil)
	descGPUsAl = prometheus.NewDesc("juice_sim_gpus_allocated",
		"GPUs of the pool holding at least one session (whole or slice).", []string{"pool"}, nil)
	descVRAM   = prometheus.NewDesc("juice_sim_vram_bytes", "VRAM of the pool's GPUs.", []string{"pool"}, nil)
	descVRAMAl = prometheus.NewDesc("juice_sim_vram_allocated_bytes", "VRAM handed out to sessions.", []string{"pool"}, nil)
)

func newMetrics(s *Sim) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_sim_http_requests_total", Help: "HTTP requests by route and status code (0 = connection dropped).",
		}, []string{"route", "code"}),
		faults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_sim_faults_injected_total", Help: "Injected faults by kind.",
		}, []string{"kind"}),
	}
	m.reg.MustRegister(m.requests, m.faults, stateCollector{s})
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry exposes the simulator's metrics registry (for tests that read metrics directly).
func (s *Sim) Registry() *prometheus.Registry { return s.metrics.reg }

// stateCollector computes the gauges from the scheduler state at scrape time, so they can never
// drift from the truth.
type stateCollector struct{ s *Sim }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessions, descAgents, descGPUs, descGPUsAl, descVRAM, descVRAMAl} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	states := []string{juiceapi.StateQueued, juiceapi.StateAssigned, juiceapi.StateActive, juiceapi.StateCanceling, juiceapi.StateClosed}
	sessions := map[string]map[string]int{}
	for _, id := range s.poolOrder {
		sessions[id] = map[string]int{}
	}
	for _, ss := range s.order {
		if m, ok := sessions[ss.req.PoolID]; ok {
			m[ss.state]++
		}
	}
	for _, id := range s.poolOrder {
		for _, st := range states {
			ch <- prometheus.MustNewConstMetric(descSessions, prometheus.GaugeValue, float64(sessions[id][st]), id, st)
		}
		agents := map[string]int{}
		var gpus, gpusAl int
		var vram, vramAl uint64
		for _, a := range s.pools[id].agents {
			agents[a.state]++
			for _, g := range a.gpus {
				gpus++
				vram += g.vram
				vramAl += g.used
				if g.used > 0 {
					gpusAl++
				}
			}
		}
		for _, st := range []string{juiceapi.AgentActive, juiceapi.AgentDisabled, juiceapi.AgentMissing, juiceapi.AgentClosed} {
			ch <- prometheus.MustNewConstMetric(descAgents, prometheus.GaugeValue, float64(agents[st]), id, st)
		}
		ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(gpus), id)
		ch <- prometheus.MustNewConstMetric(descGPUsAl, prometheus.GaugeValue, float64(gpusAl), id)
		ch <- prometheus.MustNewConstMetric(descVRAM, prometheus.GaugeValue, float64(vram), id)
		ch <- prometheus.MustNewConstMetric(descVRAMAl, prometheus.GaugeValue, float64(vramAl), id)
	}
}

// instrument counts requests by route pattern and status.
func (s *Sim) instrument(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(rec.code)).Inc()
		}()
		next.ServeHTTP(rec, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	code        int
	wroteHeader bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if !r.wroteHeader {
		r.code, r.wroteHeader = 200, true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (the drop faults hijack it).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
