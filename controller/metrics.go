package controller

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
)

// Metrics are the controller's Prometheus metrics, on a registry of its own so that two controllers in one test
// process do not collide.
type Metrics struct {
	Registry          *prometheus.Registry
	reconcileDuration prometheus.Histogram
	reconcileErrors   prometheus.Counter
	submitToReady     prometheus.Histogram
	prologWait        *prometheus.HistogramVec
	slurmRequests     *prometheus.CounterVec
	juiceRequests     *prometheus.HistogramVec
	leader            prometheus.Gauge
	polls             *prometheus.CounterVec
}

// NewMetrics registers every metric; store feeds the reservations-by-state gauge at scrape time.
func NewMetrics(st *store.Store) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		reconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "juice_slurm_reconcile_duration_seconds", Help: "Time of one reconcile pass over a reservation.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		reconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "juice_slurm_reconcile_errors_total", Help: "Reconcile passes that ended in an error (and were retried with backoff)."}),
		submitToReady: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "juice_slurm_submit_to_ready_seconds", Help: "From a reservation's creation to its session being ready.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		prologWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "juice_slurm_prolog_wait_seconds", Help: "How long prolog hooks waited, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)}, []string{"outcome"}),
		slurmRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_slurmrestd_requests_total", Help: "Requests to slurmrestd, by operation and result."},
			[]string{"op", "result"}),
		juiceRequests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "juice_slurm_juice_request_duration_seconds", Help: "Requests to the Juice Controller, by operation and result.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"op", "result"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "juice_slurm_leader", Help: "1 while this replica holds the leader lease and reconciles."}),
		polls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_polls_total", Help: "Polls of slurmrestd, by result."}, []string{"result"}),
	}
	m.Registry.MustRegister(m.reconcileDuration, m.reconcileErrors, m.submitToReady, m.prologWait, m.slurmRequests,
		m.juiceRequests, m.leader, m.polls, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if st != nil {
		m.Registry.MustRegister(&stateCollector{store: st, desc: prometheus.NewDesc("juice_slurm_reservations",
			"Reservations by pool and state.", []string{"pool", "state"}, nil)})
	}
	return m
}

// The methods accept a nil *Metrics, so tests and tools can leave metrics out.

func (m *Metrics) observeReconcile(start time.Time, err error) {
	if m == nil {
		return
	}
	m.reconcileDuration.Observe(time.Since(start).Seconds())
	if err != nil && !errors.Is(err, context.Canceled) {
		m.reconcileErrors.Inc()
	}
}

func (m *Metrics) observeReady(r *reconcile.Reservation) {
	if m == nil {
		return
	}
	m.submitToReady.Observe(r.Status.ReadyAt.Sub(r.CreatedAt).Seconds())
}

func (m *Metrics) observePrologWait(d time.Duration, outcome string) {
	if m == nil {
		return
	}
	m.prologWait.WithLabelValues(outcome).Observe(d.Seconds())
}

func (m *Metrics) observeSlurm(op string, err error) {
	if m == nil {
		return
	}
	m.slurmRequests.WithLabelValues(op, result(err)).Inc()
}

func (m *Metrics) observeJuice(op string, start time.Time, err error) {
	if m == nil {
		return
	}
	m.juiceRequests.WithLabelValues(op, result(err)).Observe(time.Since(start).Seconds())
}

func (m *Metrics) observePoll(err error) {
	if m == nil {
		return
	}
	m.polls.WithLabelValues(result(err)).Inc()
}

func (m *Metrics) setLeader(on bool) {
	if m == nil {
		return
	}
	if on {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// stateCollector counts reservations by state at scrape time: the database is the truth, and any replica can
// report it.
type stateCollector struct {
	store *store.Store
	desc  *prometheus.Desc
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.store.Summary(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n.N), n.Pool, string(n.State))
	}
}
