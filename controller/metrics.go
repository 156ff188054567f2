package controller

import (
	"context"
	"errors"
	"regexp"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/juice-slurm/juice-slurm/reconcile"
	"github.com/juice-slurm/juice-slurm/reconcile/policy"
	"github.com/juice-slurm/juice-slurm/reconcile/store"
	"github.com/juice-slurm/juice-slurm/slurmrest"
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
	hookRefused       *prometheus.CounterVec
	lastGoodPoll      prometheus.Gauge
	sweeps            *prometheus.CounterVec
	sweptSessions     prometheus.Counter
	handoffs          prometheus.Counter
	hookRequests      *prometheus.CounterVec
	prunes            *prometheus.CounterVec
	pruned            prometheus.Counter
	collectorErrors   *prometheus.CounterVec
	buildInfo         *prometheus.GaugeVec
	licenseCount      *prometheus.GaugeVec
	licenseUpdates    *prometheus.CounterVec

	all     []prometheus.Collector        // every collector registered, for Names
	leading atomic.Bool                   // the reservations gauge and queue depths are the leader's to export
	queues  atomic.Pointer[queueLengths]  // the leader's work queues, while it leads
	policy  atomic.Pointer[policy.Policy] // the site's pools: the only pool labels (nil: the first maxPoolLabels seen)
}

// queueLengths reads the depth of the leader's work queues.
type queueLengths map[string]func() int

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
		hookRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_hook_refused_total", Help: "Hook API connections closed and calls refused over a cap, or from a uid that may not call the hook socket (limit uid), by limit."},
			[]string{"limit"}),
		lastGoodPoll: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "juice_slurm_last_successful_poll_timestamp_seconds", Help: "When the leader last listed slurmrestd's jobs without an error (Unix time)."}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_sweeps_total", Help: "Sweeps for sessions that belong to no live run, by result."}, []string{"result"}),
		sweptSessions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "juice_slurm_swept_sessions_total", Help: "Sessions the sweep cancelled because they belonged to no live run."}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "juice_slurm_handoffs_total", Help: "Sessions an ended run passed to the next like run (session hand-off) instead of cancelling them."}),
		hookRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_hook_requests_total", Help: "Calls of the hook API, by hook and outcome (ready, waiting, failed, none, released, or unauthorized, bad_request, error)."},
			[]string{"hook", "outcome"}),
		prunes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_prunes_total", Help: "Prunes of the runs that ended longer than the retention ago, by result."}, []string{"result"}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "juice_slurm_pruned_reservations_total", Help: "Reservations of ended runs deleted by the retention."}),
		collectorErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_collector_errors_total", Help: "Scrapes at which a metric read at scrape time could not be read and was left out, by collector (reservations, token_slurmrestd, token_juice)."},
			[]string{"collector"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "juice_slurm_build_info", Help: "Always 1: the version of this controller and the Go it was built with."},
			[]string{"version", "goversion"}),
		licenseCount: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "juice_slurm_license_count", Help: "The count of each pool's Slurm license juice_<pool>@juice in slurmdbd, as the leader last read or wrote it (licenses = on; exported by the leader only)."},
			[]string{"pool"}),
		licenseUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "juice_slurm_license_updates_total", Help: "sacctmgr calls of the license sync (a read at the start of a term, then each count written), by result."},
			[]string{"result"}),
	}
	m.register(m.reconcileDuration, m.reconcileErrors, m.submitToReady, m.prologWait, m.slurmRequests,
		m.juiceRequests, m.leader, m.polls, m.hookRefused, m.lastGoodPoll, m.sweeps, m.sweptSessions, m.handoffs, m.hookRequests, m.prunes, m.pruned,
		m.collectorErrors, m.buildInfo, m.licenseCount, m.licenseUpdates,
		&queueCollector{m: m, desc: prometheus.NewDesc("juice_slurm_queue_depth",
			"Keys waiting in the leader's work queues (ready now or later), by queue.", []string{"queue"}, nil)},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.buildInfo.WithLabelValues("unknown", runtime.Version()).Set(1)
	// The series the alerts take increase() of exist at zero from the start, so that their first count shows.
	for _, r := range []string{"ok", "error"} {
		m.prunes.WithLabelValues(r)
		m.licenseUpdates.WithLabelValues(r)
	}
	for _, limit := range []string{"connections", "waits_per_peer", "uid"} {
		m.hookRefused.WithLabelValues(limit)
	}
	if st != nil {
		m.watchReservations(st.OpenCounts)
	}
	return m
}

// watchReservations exports juice_slurm_reservations, read at each scrape from counts.
func (m *Metrics) watchReservations(counts func(context.Context) ([]store.Count, error)) {
	m.register(&stateCollector{counts: counts, m: m, errors: m.collectorError("reservations"),
		desc: prometheus.NewDesc("juice_slurm_reservations",
			"Open reservations of this cluster by pool and state, exported by the leader only (sum over replicas is right).",
			[]string{"pool", "state"}, nil), pools: map[string]bool{}})
}

// collectorError is the error counter of a collector that reads its values at scrape time. Such a collector that
// fails leaves out its own series and counts the failure: it must not send an invalid metric, which fails the
// whole scrape (promhttp answers 500) and with it every alert on this replica, the one for that failure too.
// The counter exists at zero from the start, so that increase() sees its first error.
func (m *Metrics) collectorError(collector string) prometheus.Counter {
	return m.collectorErrors.WithLabelValues(collector)
}

func (m *Metrics) register(cs ...prometheus.Collector) {
	m.Registry.MustRegister(cs...)
	m.all = append(m.all, cs...)
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Names are the names of every metric family this registry may export.
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range m.all {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []string
	for d := range ch {
		if sm := fqName.FindStringSubmatch(d.String()); sm != nil {
			out = append(out, sm[1])
		}
	}
	return out
}

// SetVersion names this build in juice_slurm_build_info.
func (m *Metrics) SetVersion(version string) {
	if m == nil {
		return
	}
	m.buildInfo.Reset()
	m.buildInfo.WithLabelValues(version, runtime.Version()).Set(1)
}

// WatchTokenExpiry exports juice_slurm_token_expiry_timestamp_seconds{token=name}, read at each scrape from the
// token's JWT "exp" claim; a token that is not a JWT with an expiry (a Juice M2M token) exports nothing.
func (m *Metrics) WatchTokenExpiry(name string, token func() (string, error)) {
	if m == nil {
		return
	}
	m.register(&tokenCollector{token: token, errors: m.collectorError("token_" + name), desc: prometheus.NewDesc(
		"juice_slurm_token_expiry_timestamp_seconds", "When a token this replica uses expires (Unix time, from its JWT exp claim).",
		nil, prometheus.Labels{"token": name})})
}

// The methods accept a nil *Metrics, so tests and tools can leave metrics out.

// SetLicense reports the count of pool's Slurm license (licenses.Metrics).
func (m *Metrics) SetLicense(pool string, count int) {
	if m != nil {
		m.licenseCount.WithLabelValues(pool).Set(float64(count))
	}
}

// ObserveLicenseUpdate counts one sacctmgr call of the license sync, by result (licenses.Metrics).
func (m *Metrics) ObserveLicenseUpdate(result string) {
	if m != nil {
		m.licenseUpdates.WithLabelValues(result).Inc()
	}
}

// ObserveHookRefused counts a hook API connection closed, or a call refused, over the limit.
func (m *Metrics) ObserveHookRefused(limit string) {
	if m != nil {
		m.hookRefused.WithLabelValues(limit).Inc()
	}
}

// ObserveReconcile times one reconcile pass and counts it when it failed.
func (m *Metrics) ObserveReconcile(start time.Time, err error) {
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

// observeHandoff counts a session passed from an ended run to the next like one.
func (m *Metrics) observeHandoff(giver, taker *reconcile.Reservation) {
	if m == nil {
		return
	}
	m.handoffs.Inc()
}

// ObservePrologWait times a prolog's wait by its outcome.
func (m *Metrics) ObservePrologWait(d time.Duration, outcome string) {
	if m == nil {
		return
	}
	m.prologWait.WithLabelValues(outcome).Observe(d.Seconds())
}

// ObserveSlurm counts one call of slurmrestd by its operation and result.
func (m *Metrics) ObserveSlurm(op string, err error) {
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
	if err == nil {
		m.lastGoodPoll.SetToCurrentTime()
	}
}

func (m *Metrics) observeSweep(cancelled int, err error) {
	if m == nil {
		return
	}
	m.sweeps.WithLabelValues(result(err)).Inc()
	m.sweptSessions.Add(float64(cancelled))
}

// ObservePrune counts one prune by its result, and the reservations it deleted: a prune that failed after some
// batches deleted those rows all the same, and a failure counts once however many rows went before it.
func (m *Metrics) ObservePrune(n int64, err error) {
	if m == nil {
		return
	}
	m.pruned.Add(float64(n))
	if errors.Is(err, context.Canceled) {
		return // the replica stopped leading: not a failure of the prune
	}
	m.prunes.WithLabelValues(result(err)).Inc()
}

// ObserveHook counts one call of a hook by its outcome.
func (m *Metrics) ObserveHook(hook, outcome string) {
	if m == nil {
		return
	}
	m.hookRequests.WithLabelValues(hook, outcome).Inc()
}

// LeadQueues exports the depths of the leader's queues while it leads; the returned func stops that.
func (m *Metrics) LeadQueues(lengths map[string]func() int) func() {
	if m == nil {
		return func() {}
	}
	q := queueLengths(lengths)
	m.queues.Store(&q)
	return func() { m.queues.Store(nil) }
}

func (m *Metrics) setLeader(on bool) {
	if m == nil {
		return
	}
	m.leading.Store(on)
	if on {
		m.leader.Set(1)
	} else {
		m.leader.Set(0)
		m.licenseCount.Reset() // the leader's to export
	}
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// stateCollector counts the open reservations of this cluster by pool and state at scrape time, with one cheap
// query on the index of open rows (Store.OpenCounts): the history of ended runs is not read. Only the leader
// exports it, so that a sum over replicas counts each reservation once. A pool seen once is exported with zeros
// after its last reservation ends, so graphs and alerts see the drop rather than a gap.
type stateCollector struct {
	counts func(context.Context) ([]store.Count, error) // Store.OpenCounts
	m      *Metrics
	errors prometheus.Counter
	desc   *prometheus.Desc
	mu     sync.Mutex
	pools  map[string]bool
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.m.leading.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.counts(ctx)
	if err != nil {
		c.errors.Inc() // a database failover: the gauge is left out of this scrape, the rest is served
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := map[string]map[reconcile.State]int{}
	for _, k := range counts {
		pool := c.label(k.Pool)
		c.pools[pool] = true
		if n[pool] == nil {
			n[pool] = map[reconcile.State]int{}
		}
		n[pool][k.State] += k.N
	}
	for pool := range c.pools {
		for _, s := range reconcile.States {
			if !s.Final() {
				ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[pool][s]), pool, string(s))
			}
		}
	}
}

// maxPoolLabels bounds the pools a site without a pool list gets labels for: the rest count as "other".
const maxPoolLabels = 64

// label is the pool label of a pool users typed (F13: it would be a permanent label of any text). With the site
// policy's pool list, only its pools have labels of their own; without one, the first maxPoolLabels seen do.
func (c *stateCollector) label(pool string) string {
	if p := c.m.policy.Load(); p != nil && len(p.Pools) > 0 {
		if p.KnowsPool(pool) {
			return pool
		}
		return "other"
	}
	if c.pools[pool] || len(c.pools) < maxPoolLabels {
		return pool
	}
	return "other"
}

// SetPolicy gives the metrics the site policy, whose pools are the only ones labelled by name.
func (m *Metrics) SetPolicy(p *policy.Policy) {
	if m != nil {
		m.policy.Store(p)
	}
}

// queueCollector exports the leader's queue depths.
type queueCollector struct {
	m    *Metrics
	desc *prometheus.Desc
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q := c.m.queues.Load()
	if q == nil {
		return
	}
	for name, n := range *q {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n()), name)
	}
}

// tokenCollector reads a token's expiry at scrape time.
type tokenCollector struct {
	token  func() (string, error)
	errors prometheus.Counter
	desc   *prometheus.Desc
}

func (c *tokenCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *tokenCollector) Collect(ch chan<- prometheus.Metric) {
	tok, err := c.token()
	if err != nil {
		c.errors.Inc() // an unreadable token file: its expiry is left out of this scrape, the rest is served
		return
	}
	if exp, ok := slurmrest.JWTExpiry(tok); ok {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(exp.Unix()))
	}
}
