package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/metrics"
)

// Metrics are the fleet's Prometheus metrics: the engine's, from gpuprov's
// metrics.Collector (launches, attempts, failures, blocks, live VMs, API
// calls, ...; see docs/observability.md), and the fleet's own below, fed by
// its loop. Serve Registry.
type Metrics struct {
	// Registry holds every metric; serve it with promhttp.HandlerFor.
	Registry *prometheus.Registry
	// Engine is the library's collector, fed by both of the replica's
	// Provisioners (New passes its Options to them).
	Engine *metrics.Collector

	replaced *prometheus.CounterVec
	orphans  *prometheus.GaugeVec
	target   prometheus.Gauge
}

// NewMetrics returns the fleet's metrics in a registry of their own. The
// engine's gauges of live VMs and blocks are read from j at each scrape.
func NewMetrics(j metrics.JournalReader) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Engine:   metrics.New(metrics.WithJournal(j)),
		replaced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fleet_replacements_total", Help: "Machines this replica replaced, by reason (gone, status-failed, ...).",
		}, []string{"reason"}),
		orphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleet_orphans", Help: "Instances of this installation the journal does not own, by provider (Sweep dry run).",
		}, []string{"provider"}),
		target: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fleet_target", Help: "Machines the fleet keeps alive.",
		}),
	}
	m.Registry.MustRegister(m.Engine, m.replaced, m.orphans, m.target)
	return m
}

// setOrphans sets the orphans found by a Sweep dry run.
func (m *Metrics) setOrphans(orphans []gpuprov.Orphan) {
	m.orphans.Reset()
	for _, o := range orphans {
		m.orphans.WithLabelValues(o.Provider).Inc()
	}
}
