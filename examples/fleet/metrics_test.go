package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal/sqlite"
)

// TestMetricsLint lints the fleet's registry, the library's collector in
// it, with a series in each of the fleet's own metrics.
func TestMetricsLint(t *testing.T) {
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m := NewMetrics(db)
	m.target.Set(3)
	m.replaced.WithLabelValues("gone").Inc()
	m.setOrphans([]gpuprov.Orphan{{Provider: "sim-a"}, {Provider: "sim-a"}})
	m.Engine.Event(gpuprov.Event{Type: gpuprov.EvAttempt, Provider: "sim-a"})
	problems, err := testutil.GatherAndLint(m.Registry)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	for name, want := range map[string]float64{"fleet_target": 3, "fleet_orphans": 2, "fleet_replacements_total": 1, "gpuprov_attempts_total": 1} {
		got := gaugeSum(t, m, name) + counterSum(t, m, name)
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
