package metrics

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// lifecycle is the events of one VM named vm that fails over once and is
// deleted, each of them carrying values no label may take: the VM's name,
// its instance id, its zone and an error message.
func lifecycle(vm string, i int) []gpuprov.Event {
	e := func(typ, prov, kind string, at time.Duration) gpuprov.Event {
		return gpuprov.Event{Type: typ, VM: vm, Provider: prov, ErrorKind: kind, Time: t0.Add(at),
			Region: "us-east", Zone: fmt.Sprintf("us-east-%da", i), InstanceID: fmt.Sprintf("i-%08x", i),
			Message: fmt.Sprintf("no capacity for %s (request %d)", vm, i), Owner: fmt.Sprintf("host/%d", i)}
	}
	return []gpuprov.Event{
		e(gpuprov.EvLaunch, "", "", 0),
		e(gpuprov.EvAttempt, "sim-a", "", time.Second),
		e(gpuprov.EvFailure, "sim-a", "capacity", 2*time.Second),
		e(gpuprov.EvBlocked, "sim-a", "capacity", 2*time.Second),
		e(gpuprov.EvAttempt, "sim-b", "", 3*time.Second),
		e(gpuprov.EvRetry, "sim-b", "transient", 4*time.Second),
		e(gpuprov.EvReady, "sim-b", "", time.Duration(i%600)*time.Second),
		e(gpuprov.EvDeleting, "", "", time.Hour),
		e(gpuprov.EvTeardownError, "", "unavailable", time.Hour),
		e(gpuprov.EvRecovered, "", "", time.Hour),
		e(gpuprov.EvDeleted, "", "", time.Hour),
	}
}

func series(c *Collector) int { return testutil.CollectAndCount(c) }

// TestLabelsBounded feeds 1,000 VMs' events and calls: the series stay
// those of 10 VMs, and nothing is remembered of a VM once it ended.
func TestLabelsBounded(t *testing.T) {
	c := New()
	run := func(from, to int) {
		for i := from; i < to; i++ {
			for _, e := range lifecycle(fmt.Sprintf("vm-%d", i), i) {
				c.Event(e)
			}
			c.Call(gpuprov.Call{Provider: "sim-a", Op: "create", Region: "us-east", Zone: fmt.Sprintf("z-%d", i), ErrorKind: "capacity", Duration: time.Millisecond})
		}
	}
	run(0, 10)
	after10 := series(c)
	run(10, 1000)
	if got := series(c); got != after10 {
		t.Errorf("%d series after 1,000 VMs, %d after 10: a label takes unbounded values", got, after10)
	}
	if n := len(c.started); n != 0 {
		t.Errorf("%d launches remembered after every VM ended, want 0", n)
	}
	if got := testutil.ToFloat64(c.attempts.WithLabelValues("sim-a")); got != 1000 {
		t.Errorf("attempts on sim-a = %v, want 1000", got)
	}
}

// TestOutOfSetValuesAreOther: provider ids past MaxProviders, and error
// kinds, ops, states and scopes outside their sets, are reported as Other;
// neither the series nor the caches grow with them.
func TestOutOfSetValuesAreOther(t *testing.T) {
	c := New()
	for i := range 1000 {
		p := fmt.Sprintf("provider-%d", i)
		c.Event(gpuprov.Event{Type: gpuprov.EvAttempt, Provider: p})
		c.Event(gpuprov.Event{Type: gpuprov.EvFailure, Provider: "sim-a", ErrorKind: fmt.Sprintf("weird: %d", i)})
		c.Call(gpuprov.Call{Provider: "sim-a", Op: fmt.Sprintf("op-%d", i)})
	}
	c.Event(gpuprov.Event{Type: gpuprov.EvAttempt, Provider: "\xff\xfe"}) // invalid UTF-8 would panic in WithLabelValues
	// sim-a and the first MaxProviders-1 of the others are admitted.
	admitted := MaxProviders - 1
	if n := testutil.CollectAndCount(c, "gpuprov_attempts_total"); n != admitted+1 {
		t.Errorf("%d attempt series for 1,000 providers, want %d and %q", n, admitted, Other)
	}
	if got := testutil.ToFloat64(c.attempts.WithLabelValues(Other)); got != float64(1000-admitted+1) {
		t.Errorf("attempts of %q = %v, want %d", Other, got, 1000-admitted+1)
	}
	if got := testutil.ToFloat64(c.failures.WithLabelValues("sim-a", Other)); got != 1000 {
		t.Errorf("failures of kind %q = %v, want 1000", Other, got)
	}
	if got := testutil.ToFloat64(c.calls.WithLabelValues("sim-a", Other, None)); got != 1000 {
		t.Errorf("calls of op %q = %v, want 1000", Other, got)
	}
	if n := len(c.attemptsOf.m) + len(c.failuresOf.m) + len(c.callsOf.m); n > MaxProviders {
		t.Errorf("%d cached children: out-of-set values are cached", n)
	}
	// The journal's values are bounded the same way.
	if k := c.clean(key{"provider-999", "rebooting", "galaxy"}, providerC, stateC, scopeC); k != (key{Other, Other, Other}) {
		t.Errorf("clean = %q, want all %q", k, Other)
	}
}

// TestStartsBounded: launches that never end here (another process
// finished them) are forgotten, oldest first, past the bound.
func TestStartsBounded(t *testing.T) {
	c := New()
	c.maxStarted = 100
	for i := range 1000 {
		c.Event(gpuprov.Event{Type: gpuprov.EvLaunch, VM: fmt.Sprintf("vm-%d", i), Time: t0.Add(time.Duration(i) * time.Second)})
	}
	if n := len(c.started); n != 100 {
		t.Fatalf("%d launches remembered, want the bound, 100", n)
	}
	c.Event(gpuprov.Event{Type: gpuprov.EvReady, VM: "vm-999", Provider: "sim-a", Time: t0.Add(1009 * time.Second)})
	c.Event(gpuprov.Event{Type: gpuprov.EvReady, VM: "vm-0", Provider: "sim-a", Time: t0.Add(2000 * time.Second)})
	var m dto.Metric
	if err := c.launchDuration.WithLabelValues("sim-a").(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetHistogram().GetSampleCount(); got != 1 {
		t.Errorf("%d launches timed, want 1 (the newest; the oldest was forgotten)", got)
	}
	if got := m.GetHistogram().GetSampleSum(); got != 10 {
		t.Errorf("duration %vs, want 10s", got)
	}
}

// nilJournal is a journal of one ready VM, read at every scrape.
type nilJournal struct{}

func (nilJournal) ListVMs(context.Context, journal.ListOptions) ([]journal.VM, error) {
	return []journal.VM{{Name: "x", Provider: "sim-a", State: gpuprov.StateReady}}, nil
}
func (nilJournal) Blocks(context.Context, time.Time) ([]journal.Block, error) { return nil, nil }

// TestConcurrentFeed feeds events and calls from many goroutines while
// scraping; run with -race. The totals are exact.
func TestConcurrentFeed(t *testing.T) {
	c := New(WithJournal(nilJournal{}))
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	const workers, vms = 16, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var scrapes sync.WaitGroup
	scrapes.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for w := range workers {
		wg.Go(func() {
			for i := range vms {
				for _, e := range lifecycle(fmt.Sprintf("vm-%d-%d", w, i), i) {
					c.Event(e)
				}
				c.Call(gpuprov.Call{Provider: fmt.Sprintf("sim-%d", w%4), Op: "observe", Duration: time.Millisecond, Throttled: i%2 == 0})
			}
		})
	}
	wg.Wait()
	close(stop)
	scrapes.Wait()
	n := float64(workers * vms)
	for name, got := range map[string]float64{
		"attempts sim-a":     testutil.ToFloat64(c.attempts.WithLabelValues("sim-a")),
		"attempts sim-b":     testutil.ToFloat64(c.attempts.WithLabelValues("sim-b")),
		"failures":           testutil.ToFloat64(c.failures.WithLabelValues("sim-a", "capacity")),
		"blocks":             testutil.ToFloat64(c.blocks.WithLabelValues("sim-a", "capacity")),
		"retries":            testutil.ToFloat64(c.retries.WithLabelValues("sim-b")),
		"ready":              testutil.ToFloat64(c.launches.WithLabelValues("ready", None)),
		"recoveries":         testutil.ToFloat64(c.recoveries),
		"teardowns":          testutil.ToFloat64(c.teardowns.WithLabelValues("unavailable")),
		"calls sim-0..sim-3": sumOver(c.calls, "sim-0", "sim-1", "sim-2", "sim-3"),
	} {
		if got != n {
			t.Errorf("%s = %v, want %v", name, got, n)
		}
	}
	if got := testutil.ToFloat64(c.throttled.WithLabelValues("sim-0", "observe")); got != vms/2*workers/4 {
		t.Errorf("throttled sim-0 = %v, want %d", got, vms/2*workers/4)
	}
	if len(c.started) != 0 {
		t.Errorf("%d launches remembered, want 0", len(c.started))
	}
}

func sumOver(v *prometheus.CounterVec, providers ...string) float64 {
	s := 0.0
	for _, p := range providers {
		s += testutil.ToFloat64(v.WithLabelValues(p, "observe", None))
	}
	return s
}
