package main

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/org/gpuprov"
)

// Metrics are the fleet's Prometheus metrics, fed by the engine's events
// (Event, a gpuprov.WithEvents sink) and by the fleet's own loop. Register
// them with Registry.
type Metrics struct {
	// Registry holds every metric below; serve it with promhttp.HandlerFor.
	Registry *prometheus.Registry

	launchSeconds *prometheus.HistogramVec
	attempts      *prometheus.CounterVec
	failures      *prometheus.CounterVec
	outcomes      *prometheus.CounterVec
	recovered     prometheus.Counter
	replaced      *prometheus.CounterVec
	live          *prometheus.GaugeVec
	orphans       *prometheus.GaugeVec
	target        prometheus.Gauge

	mu      sync.Mutex
	started map[string]time.Time // VM → its launch event's time
}

// NewMetrics returns the fleet's metrics in a registry of their own.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		launchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gpuprov_launch_duration_seconds", Help: "Time from a launch request to the VM being ready, by provider (launches this replica started).",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 14),
		}, []string{"provider"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_attempts_total", Help: "Attempts started on an offer, by provider.",
		}, []string{"provider"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_attempt_failures_total", Help: "Attempts that failed, by provider and error kind (capacity, quota, transient, ...).",
		}, []string{"provider", "kind"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuprov_launches_total", Help: "Launches that ended, by outcome (ready, failed).",
		}, []string{"outcome"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuprov_recovered_total", Help: "VMs this replica took over from a replica whose lease lapsed.",
		}),
		replaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_replacements_total", Help: "Machines this replica replaced, by reason (gone, status-failed, ...).",
		}, []string{"reason"}),
		live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuprov_live_vms", Help: "Ready machines of the fleet, by provider, as of the last reconcile.",
		}, []string{"provider"}),
		orphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuprov_orphans", Help: "Instances of this installation the journal does not own, by provider (Sweep dry run).",
		}, []string{"provider"}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_target", Help: "Machines the fleet keeps alive.",
		}),
		started: map[string]time.Time{},
	}
	m.Registry.MustRegister(m.launchSeconds, m.attempts, m.failures, m.outcomes, m.recovered, m.replaced, m.live, m.orphans, m.target)
	return m
}

// Event updates the metrics from one engine event. It is a gpuprov
// WithEvents sink: quick and non-blocking.
func (m *Metrics) Event(e gpuprov.Event) {
	switch e.Type {
	case gpuprov.EvLaunch:
		m.mu.Lock()
		m.started[e.VM] = e.Time
		m.mu.Unlock()
	case gpuprov.EvAttempt:
		m.attempts.WithLabelValues(e.Provider).Inc()
	case gpuprov.EvFailure:
		m.failures.WithLabelValues(e.Provider, e.ErrorKind).Inc()
	case gpuprov.EvRecovered:
		m.recovered.Inc()
	case gpuprov.EvReady:
		m.outcomes.WithLabelValues("ready").Inc()
		m.mu.Lock()
		start, ok := m.started[e.VM]
		delete(m.started, e.VM)
		m.mu.Unlock()
		if ok {
			m.launchSeconds.WithLabelValues(e.Provider).Observe(e.Time.Sub(start).Seconds())
		}
	case gpuprov.EvFailed:
		m.outcomes.WithLabelValues("failed").Inc()
		m.mu.Lock()
		delete(m.started, e.VM)
		m.mu.Unlock()
	}
}

// setLive sets the ready machines by provider.
func (m *Metrics) setLive(byProvider map[string]int) {
	m.live.Reset()
	for p, n := range byProvider {
		m.live.WithLabelValues(p).Set(float64(n))
	}
}

// setOrphans sets the orphans found by a Sweep dry run.
func (m *Metrics) setOrphans(orphans []gpuprov.Orphan) {
	m.orphans.Reset()
	for _, o := range orphans {
		m.orphans.WithLabelValues(o.Provider).Inc()
	}
}
