package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/metrics"
)

// Every journal is a JournalReader.
var _ metrics.JournalReader = journal.Journal(nil)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// ev is an event of vm at t0+at, with a provider and an error kind where
// the engine sets them, and what a label must never carry (instance id,
// zone, message).
func ev(typ, vm, prov, kind string, at time.Duration) gpuprov.Event {
	return gpuprov.Event{Type: typ, VM: vm, Provider: prov, ErrorKind: kind, Time: t0.Add(at),
		Region: "us-east", Zone: "us-east-1a", InstanceID: "i-" + vm, Message: "message of " + vm, Attempt: 1}
}

// feed hands events to c in order.
func feed(c *metrics.Collector, evs ...gpuprov.Event) {
	for _, e := range evs {
		c.Event(e)
	}
}

// compare checks the exposition of the named metrics against want (the
// text format without HELP lines, which compare adds from c).
func compare(t *testing.T, c prometheus.Collector, want string, names ...string) {
	t.Helper()
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// story is three launches and a stuck deletion, in events:
//
//   - vm-1: stocked out on sim-a (blocked), retried once on sim-b, ready on
//     sim-b 42s after its launch;
//   - vm-2: over quota on sim-a (blocked), then no offers left: failed;
//   - vm-3: launched by an earlier process, recovered here, ready on sim-a:
//     its launch ended ready, but its duration is unknown here;
//   - vm-4: a teardown that could not confirm its instance gone.
func story() []gpuprov.Event {
	return []gpuprov.Event{
		ev(gpuprov.EvLaunch, "vm-1", "", "", 0),
		ev(gpuprov.EvPlan, "vm-1", "", "", time.Second),
		ev(gpuprov.EvAttempt, "vm-1", "sim-a", "", 2*time.Second),
		ev(gpuprov.EvCreateSent, "vm-1", "sim-a", "", 2*time.Second),
		ev(gpuprov.EvFailure, "vm-1", "sim-a", "capacity", 3*time.Second),
		ev(gpuprov.EvBlocked, "vm-1", "sim-a", "capacity", 3*time.Second),
		ev(gpuprov.EvTeardown, "vm-1", "sim-a", "", 3*time.Second),
		ev(gpuprov.EvTornDown, "vm-1", "sim-a", "", 4*time.Second),
		ev(gpuprov.EvAttempt, "vm-1", "sim-b", "", 5*time.Second),
		ev(gpuprov.EvRetry, "vm-1", "sim-b", "transient", 6*time.Second),
		ev(gpuprov.EvCreated, "vm-1", "sim-b", "", 7*time.Second),
		ev(gpuprov.EvPhase, "vm-1", "sim-b", "", 8*time.Second),
		ev(gpuprov.EvReady, "vm-1", "sim-b", "", 42*time.Second),

		ev(gpuprov.EvLaunch, "vm-2", "", "", 0),
		ev(gpuprov.EvAttempt, "vm-2", "sim-a", "", time.Second),
		ev(gpuprov.EvFailure, "vm-2", "sim-a", "quota", 2*time.Second),
		ev(gpuprov.EvBlocked, "vm-2", "sim-a", "quota", 2*time.Second),
		ev(gpuprov.EvFailed, "vm-2", "", "no-offers", 3*time.Second),

		ev(gpuprov.EvRecovered, "vm-3", "", "", 0),
		ev(gpuprov.EvReady, "vm-3", "sim-a", "", 10*time.Second),

		ev(gpuprov.EvDeleting, "vm-4", "", "", 0),
		ev(gpuprov.EvTeardownError, "vm-4", "", "unavailable", time.Second),
	}
}

func TestEventMetrics(t *testing.T) {
	c := metrics.New()
	feed(c, story()...)
	cases := []struct{ name, want string }{
		{"gpuprov_attempts_total", `
# HELP gpuprov_attempts_total Attempts started on an offer, by provider.
# TYPE gpuprov_attempts_total counter
gpuprov_attempts_total{provider="sim-a"} 2
gpuprov_attempts_total{provider="sim-b"} 1
`},
		{"gpuprov_attempt_failures_total", `
# HELP gpuprov_attempt_failures_total Attempts that failed, by provider and error kind (capacity, quota, transient, connect, ...).
# TYPE gpuprov_attempt_failures_total counter
gpuprov_attempt_failures_total{error_type="capacity",provider="sim-a"} 1
gpuprov_attempt_failures_total{error_type="quota",provider="sim-a"} 1
`},
		{"gpuprov_blocks_total", `
# HELP gpuprov_blocks_total Blocks recorded on an offer, zone, region or provider after a failure, by provider and error kind.
# TYPE gpuprov_blocks_total counter
gpuprov_blocks_total{error_type="capacity",provider="sim-a"} 1
gpuprov_blocks_total{error_type="quota",provider="sim-a"} 1
`},
		{"gpuprov_launches_total", `
# HELP gpuprov_launches_total Launches that ended, by outcome (ready, failed) and error kind (none for ready ones).
# TYPE gpuprov_launches_total counter
gpuprov_launches_total{error_type="none",outcome="ready"} 2
gpuprov_launches_total{error_type="no-offers",outcome="failed"} 1
`},
		{"gpuprov_retries_total", `
# HELP gpuprov_retries_total Steps of an attempt retried after a transient error, by provider.
# TYPE gpuprov_retries_total counter
gpuprov_retries_total{provider="sim-b"} 1
`},
		{"gpuprov_recoveries_total", `
# HELP gpuprov_recoveries_total VMs this process took over to resume them (Recover).
# TYPE gpuprov_recoveries_total counter
gpuprov_recoveries_total 1
`},
		{"gpuprov_teardowns_incomplete_total", `
# HELP gpuprov_teardowns_incomplete_total Teardowns that could not confirm an instance gone (the VM stays deleting until Delete, Recover or Sweep finishes it), by error kind.
# TYPE gpuprov_teardowns_incomplete_total counter
gpuprov_teardowns_incomplete_total{error_type="unavailable"} 1
`},
		// vm-1 only: vm-3's launch event came before this process.
		{"gpuprov_launch_duration_seconds", `
# HELP gpuprov_launch_duration_seconds Time from a launch request to its VM being ready, by the provider it is ready on (launches this process saw requested).
# TYPE gpuprov_launch_duration_seconds histogram
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="1"} 0
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="2.5"} 0
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="5"} 0
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="10"} 0
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="20"} 0
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="30"} 0
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="60"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="90"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="120"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="180"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="300"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="600"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="900"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="1200"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="1800"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="3600"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="7200"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-b",le="+Inf"} 1
gpuprov_launch_duration_seconds_sum{provider="sim-b"} 42
gpuprov_launch_duration_seconds_count{provider="sim-b"} 1
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { compare(t, c, tc.want, tc.name) })
	}
	// No API call was made, and nothing is read from a journal.
	if n := testutil.CollectAndCount(c, "gpuprov_api_calls_total", "gpuprov_vms", "gpuprov_active_blocks"); n != 0 {
		t.Errorf("%d series of API calls or journal gauges, want none", n)
	}
}

// A launch that ends failed or deleted is forgotten: a later ready event of
// the same name (a launch by another process) is not timed from it.
func TestLaunchDurationForgetsEndedLaunches(t *testing.T) {
	for _, end := range []string{gpuprov.EvFailed, gpuprov.EvDeleted} {
		t.Run(end, func(t *testing.T) {
			c := metrics.New()
			feed(c, ev(gpuprov.EvLaunch, "vm", "", "", 0), ev(end, "vm", "", "capacity", time.Second),
				ev(gpuprov.EvReady, "vm", "sim-a", "", time.Hour))
			if n := testutil.CollectAndCount(c, "gpuprov_launch_duration_seconds"); n != 0 {
				t.Errorf("a launch that ended %s was timed by a later ready event", end)
			}
		})
	}
	// A relaunch of the name is timed from its own launch event.
	c := metrics.New(metrics.WithLaunchBuckets(10, 100))
	feed(c, ev(gpuprov.EvLaunch, "vm", "", "", 0), ev(gpuprov.EvFailed, "vm", "", "no-offers", time.Second),
		ev(gpuprov.EvLaunch, "vm", "", "", time.Minute), ev(gpuprov.EvReady, "vm", "sim-a", "", time.Minute+5*time.Second))
	compare(t, c, `
# HELP gpuprov_launch_duration_seconds Time from a launch request to its VM being ready, by the provider it is ready on (launches this process saw requested).
# TYPE gpuprov_launch_duration_seconds histogram
gpuprov_launch_duration_seconds_bucket{provider="sim-a",le="10"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-a",le="100"} 1
gpuprov_launch_duration_seconds_bucket{provider="sim-a",le="+Inf"} 1
gpuprov_launch_duration_seconds_sum{provider="sim-a"} 5
gpuprov_launch_duration_seconds_count{provider="sim-a"} 1
`, "gpuprov_launch_duration_seconds")
}

func TestCallMetrics(t *testing.T) {
	c := metrics.New(metrics.WithCallBuckets(0.1, 1))
	calls := []gpuprov.Call{
		{Provider: "sim-a", Op: "plan", Duration: 50 * time.Millisecond},
		{Provider: "sim-a", Op: "create", Region: "us-east", Zone: "us-east-1a", Duration: 200 * time.Millisecond, ErrorKind: "capacity"},
		{Provider: "sim-a", Op: "create", Region: "us-east", Zone: "us-east-1a", Duration: 300 * time.Millisecond,
			ErrorKind: "transient", Throttled: true, RetryAfter: 2 * time.Second},
		{Provider: "sim-a", Op: "create", Region: "eu-west", Zone: "eu-west-1b", Duration: 2 * time.Second},
		{Provider: "sim-b", Op: "observe", Duration: 10 * time.Millisecond, ErrorKind: "transient", Throttled: true},
	}
	for _, call := range calls {
		c.Call(call)
	}
	compare(t, c, `
# HELP gpuprov_api_calls_total Cloud primitive calls, by provider, op and error kind (none: it succeeded).
# TYPE gpuprov_api_calls_total counter
gpuprov_api_calls_total{error_type="none",op="create",provider="sim-a"} 1
gpuprov_api_calls_total{error_type="capacity",op="create",provider="sim-a"} 1
gpuprov_api_calls_total{error_type="transient",op="create",provider="sim-a"} 1
gpuprov_api_calls_total{error_type="none",op="plan",provider="sim-a"} 1
gpuprov_api_calls_total{error_type="transient",op="observe",provider="sim-b"} 1
# HELP gpuprov_api_throttled_calls_total Cloud primitive calls the cloud answered with a rate limit (429 or Retry-After), by provider and op.
# TYPE gpuprov_api_throttled_calls_total counter
gpuprov_api_throttled_calls_total{op="create",provider="sim-a"} 1
gpuprov_api_throttled_calls_total{op="plan",provider="sim-a"} 0
gpuprov_api_throttled_calls_total{op="observe",provider="sim-b"} 1
# HELP gpuprov_api_retry_after_seconds_total Pauses the cloud asked of the account with Retry-After, summed, by provider and op.
# TYPE gpuprov_api_retry_after_seconds_total counter
gpuprov_api_retry_after_seconds_total{op="create",provider="sim-a"} 2
gpuprov_api_retry_after_seconds_total{op="plan",provider="sim-a"} 0
gpuprov_api_retry_after_seconds_total{op="observe",provider="sim-b"} 0
# HELP gpuprov_api_call_duration_seconds Duration of cloud primitive calls, pacing waits excluded, by provider and op.
# TYPE gpuprov_api_call_duration_seconds histogram
gpuprov_api_call_duration_seconds_bucket{op="create",provider="sim-a",le="0.1"} 0
gpuprov_api_call_duration_seconds_bucket{op="create",provider="sim-a",le="1"} 2
gpuprov_api_call_duration_seconds_bucket{op="create",provider="sim-a",le="+Inf"} 3
gpuprov_api_call_duration_seconds_sum{op="create",provider="sim-a"} 2.5
gpuprov_api_call_duration_seconds_count{op="create",provider="sim-a"} 3
gpuprov_api_call_duration_seconds_bucket{op="plan",provider="sim-a",le="0.1"} 1
gpuprov_api_call_duration_seconds_bucket{op="plan",provider="sim-a",le="1"} 1
gpuprov_api_call_duration_seconds_bucket{op="plan",provider="sim-a",le="+Inf"} 1
gpuprov_api_call_duration_seconds_sum{op="plan",provider="sim-a"} 0.05
gpuprov_api_call_duration_seconds_count{op="plan",provider="sim-a"} 1
gpuprov_api_call_duration_seconds_bucket{op="observe",provider="sim-b",le="0.1"} 1
gpuprov_api_call_duration_seconds_bucket{op="observe",provider="sim-b",le="1"} 1
gpuprov_api_call_duration_seconds_bucket{op="observe",provider="sim-b",le="+Inf"} 1
gpuprov_api_call_duration_seconds_sum{op="observe",provider="sim-b"} 0.01
gpuprov_api_call_duration_seconds_count{op="observe",provider="sim-b"} 1
`, "gpuprov_api_calls_total", "gpuprov_api_throttled_calls_total", "gpuprov_api_retry_after_seconds_total", "gpuprov_api_call_duration_seconds")
}

// fakeJournal is a JournalReader with fixed rows, or failing reads.
type fakeJournal struct {
	vms           []journal.VM
	blocks        []journal.Block
	vmErr, blkErr error
	opts          []journal.ListOptions
}

func (f *fakeJournal) ListVMs(_ context.Context, opts journal.ListOptions) ([]journal.VM, error) {
	f.opts = append(f.opts, opts)
	return f.vms, f.vmErr
}

func (f *fakeJournal) Blocks(context.Context, time.Time) ([]journal.Block, error) {
	return f.blocks, f.blkErr
}

func TestJournalGauges(t *testing.T) {
	vm := func(name, prov string, s gpuprov.State) journal.VM {
		return journal.VM{Name: name, Provider: prov, State: s, InstanceID: "i-" + name, Cluster: "c-" + name}
	}
	j := &fakeJournal{
		vms: []journal.VM{
			vm("a", "", gpuprov.StatePending), vm("b", "sim-a", gpuprov.StateProvisioning),
			vm("c", "sim-a", gpuprov.StateReady), vm("d", "sim-a", gpuprov.StateReady),
			vm("e", "sim-b", gpuprov.StateReady), vm("f", "sim-b", gpuprov.StateDeleting),
			vm("g", "sim-b", gpuprov.StateWaiting),
		},
		blocks: []journal.Block{
			{Key: "offer:sim-a|us-east|us-east-1a|gpu.h100.1x|od", Scope: "offer", Provider: "sim-a", ErrorKind: "capacity", Reason: "no capacity"},
			{Key: "offer:sim-a|eu-west|eu-west-1b|gpu.h100.1x|od", Scope: "offer", Provider: "sim-a", ErrorKind: "capacity", Reason: "no capacity"},
			{Key: "region:sim-b|us-central", Scope: "region", Provider: "sim-b", ErrorKind: "quota", Reason: "quota"},
			{Key: "spot:sim-b|eu-west", Scope: "spot", Provider: "sim-b", ErrorKind: "quota", Reason: "spot quota"},
		},
	}
	c := metrics.New(metrics.WithJournal(j))
	want := `
# HELP gpuprov_vms VMs of the journal that are not over (they may hold a machine or get one), by provider and state, read at scrape time.
# TYPE gpuprov_vms gauge
gpuprov_vms{provider="",state="pending"} 1
gpuprov_vms{provider="sim-a",state="provisioning"} 1
gpuprov_vms{provider="sim-a",state="ready"} 2
gpuprov_vms{provider="sim-b",state="deleting"} 1
gpuprov_vms{provider="sim-b",state="ready"} 1
gpuprov_vms{provider="sim-b",state="waiting"} 1
# HELP gpuprov_active_blocks Blocks of the journal in force, by provider, error kind and scope (offer, zone, region, spot, family, provider), read at scrape time.
# TYPE gpuprov_active_blocks gauge
gpuprov_active_blocks{error_type="capacity",provider="sim-a",scope="offer"} 2
gpuprov_active_blocks{error_type="quota",provider="sim-b",scope="region"} 1
gpuprov_active_blocks{error_type="quota",provider="sim-b",scope="spot"} 1
# HELP gpuprov_journal_read_errors_total Reads of the journal at scrape time that failed; the gauge each feeds (gpuprov_vms, gpuprov_active_blocks, gpuprov_billed_usd) is missing from that scrape.
# TYPE gpuprov_journal_read_errors_total counter
gpuprov_journal_read_errors_total 0
`
	compare(t, c, want, "gpuprov_vms", "gpuprov_active_blocks", "gpuprov_journal_read_errors_total")
	if len(j.opts) == 0 || !j.opts[0].Live {
		t.Errorf("ListVMs options %+v, want Live", j.opts)
	}

	// The gauges follow the journal from one scrape to the next.
	j.vms, j.blocks = j.vms[4:5], nil
	compare(t, c, `
# HELP gpuprov_vms VMs of the journal that are not over (they may hold a machine or get one), by provider and state, read at scrape time.
# TYPE gpuprov_vms gauge
gpuprov_vms{provider="sim-b",state="ready"} 1
`, "gpuprov_vms", "gpuprov_active_blocks")

	// A failed read leaves its gauge out and is counted; the rest is served.
	j.vmErr, j.blkErr = errors.New("database is down"), errors.New("database is down")
	c.Event(ev(gpuprov.EvRecovered, "x", "", "", 0))
	compare(t, c, `
# HELP gpuprov_journal_read_errors_total Reads of the journal at scrape time that failed; the gauge each feeds (gpuprov_vms, gpuprov_active_blocks, gpuprov_billed_usd) is missing from that scrape.
# TYPE gpuprov_journal_read_errors_total counter
gpuprov_journal_read_errors_total 2
# HELP gpuprov_recoveries_total VMs this process took over to resume them (Recover).
# TYPE gpuprov_recoveries_total counter
gpuprov_recoveries_total 1
`, "gpuprov_vms", "gpuprov_active_blocks", "gpuprov_journal_read_errors_total", "gpuprov_recoveries_total")
}

// TestLint lints every metric the collector exports, each with a series.
func TestLint(t *testing.T) {
	c := metrics.New(metrics.WithJournal(&fakeJournal{
		vms:    []journal.VM{{Name: "vm-1", Provider: "sim-b", State: gpuprov.StateReady}},
		blocks: []journal.Block{{Scope: "offer", Provider: "sim-a", ErrorKind: "capacity"}},
	}))
	feed(c, story()...)
	c.Call(gpuprov.Call{Provider: "sim-a", Op: "create", ErrorKind: "transient", Throttled: true, RetryAfter: time.Second})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	// Every metric was linted: none is left out for lack of a series.
	want := []string{"gpuprov_active_blocks", "gpuprov_api_call_duration_seconds", "gpuprov_api_calls_total",
		"gpuprov_api_retry_after_seconds_total", "gpuprov_api_throttled_calls_total", "gpuprov_attempt_failures_total",
		"gpuprov_attempts_total", "gpuprov_blocks_total", "gpuprov_journal_read_errors_total", "gpuprov_launch_duration_seconds",
		"gpuprov_launches_total", "gpuprov_recoveries_total", "gpuprov_retries_total", "gpuprov_teardowns_incomplete_total", "gpuprov_vms"}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range fams {
		got = append(got, f.GetName())
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("metrics exported:\n%v\nwant\n%v", got, want)
	}
}

// The hot paths allocate nothing once a label set has been seen.
func TestNoAllocations(t *testing.T) {
	c := metrics.New()
	attempt := ev(gpuprov.EvAttempt, "vm", "sim-a", "", 0)
	failure := ev(gpuprov.EvFailure, "vm", "sim-a", "capacity", 0)
	ignored := ev(gpuprov.EvPhase, "vm", "sim-a", "", 0)
	call := gpuprov.Call{Provider: "sim-a", Op: "create", ErrorKind: "transient", Throttled: true, RetryAfter: time.Second, Duration: time.Millisecond}
	c.Event(attempt)
	c.Event(failure)
	c.Call(call)
	for name, f := range map[string]func(){
		"attempt event": func() { c.Event(attempt) },
		"failure event": func() { c.Event(failure) },
		"ignored event": func() { c.Event(ignored) },
		"call":          func() { c.Call(call) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

func BenchmarkEvent(b *testing.B) {
	c := metrics.New()
	e := ev(gpuprov.EvFailure, "vm", "sim-a", "capacity", 0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Event(e)
		}
	})
}

func BenchmarkCall(b *testing.B) {
	c := metrics.New()
	call := gpuprov.Call{Provider: "sim-a", Op: "observe", Duration: time.Millisecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Call(call)
		}
	})
}

// gpuprov_billed_usd sums the bill by provider, and reads it at most once
// per CostEvery however often Prometheus scrapes.
func TestBilledGauge(t *testing.T) {
	reads := 0
	costs := []gpuprov.AttemptCost{
		{VM: "a", Attempt: 1, Provider: "sim-a", Outcome: "failed: accept", USD: 0.0415},
		{VM: "a", Attempt: 2, Provider: "sim-a", Outcome: "ready", USD: 1.5},
		{VM: "b", Attempt: 1, Provider: "sim-b", Outcome: "deleted", USD: 2.25},
	}
	var failWith error
	c := metrics.New(metrics.WithCosts(func(context.Context) ([]gpuprov.AttemptCost, error) {
		reads++
		return costs, failWith
	}))
	want := `
# HELP gpuprov_billed_usd What the journal's VMs billed, as gpuprov counts the bill (every attempt that made an instance, failed ones included, in its cloud's billing increments and minimum), by provider; read at most once a minute.
# TYPE gpuprov_billed_usd gauge
gpuprov_billed_usd{provider="sim-a"} 1.5415
gpuprov_billed_usd{provider="sim-b"} 2.25
`
	compare(t, c, want, "gpuprov_billed_usd")
	costs = nil
	compare(t, c, want, "gpuprov_billed_usd") // the minute is not over: the same sums
	if reads != 1 {
		t.Errorf("%d reads of the costs for two scrapes in a minute, want 1", reads)
	}

	failing := metrics.New(metrics.WithCosts(func(context.Context) ([]gpuprov.AttemptCost, error) {
		return nil, errors.New("database is down")
	}))
	compare(t, failing, `
# HELP gpuprov_journal_read_errors_total Reads of the journal at scrape time that failed; the gauge each feeds (gpuprov_vms, gpuprov_active_blocks, gpuprov_billed_usd) is missing from that scrape.
# TYPE gpuprov_journal_read_errors_total counter
gpuprov_journal_read_errors_total 1
`, "gpuprov_billed_usd", "gpuprov_journal_read_errors_total")
}
