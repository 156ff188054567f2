package world

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/juice-slurm/juice-slurm/juiceapi/juicesim"
)

// Sum adds up a metric family of g over the series whose labels include every name, value pair in match: the
// values of counters and gauges, the sample counts of histograms.
func Sum(g prometheus.Gatherer, name string, match ...string) (float64, error) {
	if len(match)%2 != 0 {
		return 0, fmt.Errorf("sum %s: labels %q are not name, value pairs", name, match)
	}
	mfs, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("sum %s: %w", name, err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i < len(match); i += 2 {
				if !hasLabel(m, match[i], match[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum, nil
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// SimCalls counts the simulator's answered requests on a route ("GET /v1/agents"), any status.
func SimCalls(t testing.TB, sim *juicesim.Sim, route string) int {
	t.Helper()
	n, err := Sum(sim.Registry(), "juice_sim_http_requests_total", "route", route)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
