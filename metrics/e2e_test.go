package metrics_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/metrics"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// TestLaunchThatFailsOver runs a real launch on the simulated cloud with
// the Collector attached: the cheapest H100 (sim-a, us-east) is stocked
// out, so the launch fails over once, to sim-b, the next cheapest.
func TestLaunchThatFailsOver(t *testing.T) {
	ctx := context.Background()
	srv := simserver.NewServer(t, simserver.WithoutSSH(), simserver.WithTiming(simserver.Timing{}),
		simserver.WithFaults("sim-a", simserver.Faults{StockoutOffers: []string{"a-h100x1-use1a"}}))
	j, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })

	mc := metrics.New(metrics.WithJournal(j))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(mc)
	opts := mc.Options()
	for _, cloud := range []string{"sim-a", "sim-b"} {
		opts = append(opts, gpuprov.WithRegistryProvider(sim.ID, provider.Settings{Name: cloud, Config: sim.Config{
			Endpoint: srv.URL(), Cloud: cloud, APIKey: srv.APIKey(cloud),
			PollInterval: 20 * time.Millisecond, ConsistencyWindow: 100 * time.Millisecond, RequestTimeout: 5 * time.Second,
		}}))
	}
	p, err := gpuprov.New(j, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	vm, err := p.Launch(ctx, gpuprov.Request{Name: "train-1", GPU: "H100-80GB", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if vm.Provider != "sim-b" {
		t.Fatalf("ready on %s, want the failover to sim-b", vm.Provider)
	}

	gatherCompare(t, reg, `
# HELP gpuprov_attempts_total Attempts started on an offer, by provider.
# TYPE gpuprov_attempts_total counter
gpuprov_attempts_total{provider="sim-a"} 1
gpuprov_attempts_total{provider="sim-b"} 1
# HELP gpuprov_attempt_failures_total Attempts that failed, by provider and error kind (capacity, quota, transient, connect, ...).
# TYPE gpuprov_attempt_failures_total counter
gpuprov_attempt_failures_total{error_type="capacity",provider="sim-a"} 1
# HELP gpuprov_blocks_total Blocks recorded on an offer, zone, region or provider after a failure, by provider and error kind.
# TYPE gpuprov_blocks_total counter
gpuprov_blocks_total{error_type="capacity",provider="sim-a"} 1
# HELP gpuprov_launches_total Launches that ended, by outcome (ready, failed) and error kind (none for ready ones).
# TYPE gpuprov_launches_total counter
gpuprov_launches_total{error_type="none",outcome="ready"} 1
# HELP gpuprov_vms VMs of the journal that are not over (they may hold a machine or get one), by provider and state, read at scrape time.
# TYPE gpuprov_vms gauge
gpuprov_vms{provider="sim-b",state="ready"} 1
# HELP gpuprov_active_blocks Blocks of the journal in force, by provider, error kind and scope (offer, zone, region, spot, family, provider), read at scrape time.
# TYPE gpuprov_active_blocks gauge
gpuprov_active_blocks{error_type="capacity",provider="sim-a",scope="offer"} 1
# HELP gpuprov_recoveries_total VMs this process took over to resume them (Recover).
# TYPE gpuprov_recoveries_total counter
gpuprov_recoveries_total 0
`, "gpuprov_attempts_total", "gpuprov_attempt_failures_total", "gpuprov_blocks_total", "gpuprov_launches_total",
		"gpuprov_vms", "gpuprov_active_blocks", "gpuprov_recoveries_total")
	for _, name := range []string{"gpuprov_teardowns_incomplete_total", "gpuprov_retries_total", "gpuprov_journal_read_errors_total"} {
		if n := counterSum(t, reg, name); n != 0 {
			t.Errorf("%s = %v, want 0", name, n)
		}
	}

	launch := family(t, reg, "gpuprov_launch_duration_seconds")
	if len(launch.GetMetric()) != 1 || label(launch.GetMetric()[0], "provider") != "sim-b" ||
		launch.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("launch duration: %v, want one launch timed, on sim-b", launch.GetMetric())
	}
	if d := launch.GetMetric()[0].GetHistogram().GetSampleSum(); d <= 0 || d > time.Minute.Seconds() {
		t.Errorf("launch took %vs by the histogram", d)
	}

	t.Run("api calls", func(t *testing.T) {
		calls := family(t, reg, "gpuprov_api_calls_total")
		if len(calls.GetMetric()) == 0 {
			t.Skip("no gpuprov_api_calls_total: the engine does not deliver gpuprov.Call to WithCallObserver yet")
		}
		byKey := map[[3]string]float64{}
		for _, m := range calls.GetMetric() {
			byKey[[3]string{label(m, "provider"), label(m, "op"), label(m, "error_type")}] += m.GetCounter().GetValue()
		}
		if got := byKey[[3]string{"sim-a", "create", "capacity"}]; got != 1 {
			t.Errorf("sim-a creates refused for capacity = %v, want 1 (all calls: %v)", got, byKey)
		}
		if got := byKey[[3]string{"sim-b", "create", metrics.None}]; got != 1 {
			t.Errorf("sim-b creates that succeeded = %v, want 1 (all calls: %v)", got, byKey)
		}
		for _, prov := range []string{"sim-a", "sim-b"} {
			if byKey[[3]string{prov, "plan", metrics.None}] == 0 {
				t.Errorf("no plan call of %s counted (all calls: %v)", prov, byKey)
			}
		}
		var timed uint64
		for _, m := range family(t, reg, "gpuprov_api_call_duration_seconds").GetMetric() {
			timed += m.GetHistogram().GetSampleCount()
		}
		total := 0.0
		for _, v := range byKey {
			total += v
		}
		if float64(timed) != total {
			t.Errorf("%d calls timed, %v counted", timed, total)
		}
	})

	// Deleting the VM empties the live gauge; the counters keep what was.
	if err := p.Delete(ctx, "train-1"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "gpuprov_vms"); err != nil || n != 0 {
		t.Errorf("gpuprov_vms has %d series after the delete (%v), want none", n, err)
	}
	gatherCompare(t, reg, `
# HELP gpuprov_launches_total Launches that ended, by outcome (ready, failed) and error kind (none for ready ones).
# TYPE gpuprov_launches_total counter
gpuprov_launches_total{error_type="none",outcome="ready"} 1
`, "gpuprov_launches_total")
}

func gatherCompare(t *testing.T, g prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(g, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

func counterSum(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	s := 0.0
	for _, m := range family(t, g, name).GetMetric() {
		s += m.GetCounter().GetValue()
	}
	return s
}

func family(t *testing.T, g prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return &dto.MetricFamily{}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
