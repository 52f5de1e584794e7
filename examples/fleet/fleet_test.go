package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/journaltest"
	"github.com/org/gpuprov/journal/postgres"
	"github.com/org/gpuprov/journal/postgres/pgtest"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/providertest"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const simCloud = "sim-a"

// replica is one fleet process of the test.
type replica struct {
	sw     *atomic.Bool // the replica's power switch: true is dead
	db     *postgres.DB
	fl     *Fleet
	m      *Metrics
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // what Run returned
}

func startReplica(t *testing.T, url string, srv *simserver.Server, owner string, target int) *replica {
	t.Helper()
	db, err := postgres.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	sp, err := sim.New(sim.Config{
		Endpoint: srv.URL(), Cloud: simCloud, APIKey: srv.APIKey(simCloud),
		PollInterval: 100 * time.Millisecond, BootTimeout: 20 * time.Second, DeleteTimeout: 10 * time.Second,
		ConsistencyWindow: 300 * time.Millisecond, RequestTimeout: 5 * time.Second,
	}, sim.WithName(simCloud), sim.WithInstallation(db.Installation()), sim.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{sw: &atomic.Bool{}, db: db, m: NewMetrics(db), done: make(chan struct{})}
	r.fl, err = New(&journaltest.Killable{Journal: db, Dead: r.sw.Load}, Config{
		Target: target, GPU: "H100", Prefix: "fleet", Owner: owner,
		HealthInterval: 200 * time.Millisecond, RecoverInterval: 400 * time.Millisecond, SweepInterval: time.Second,
		MaxReplace: 3, LaunchTimeout: 20 * time.Second,
	}, r.m, gpuprov.WithProvider(providertest.Killable(sp, r.sw.Load).WithList()), gpuprov.WithLeaseTTL(2*time.Second),
		gpuprov.WithBackoff(50*time.Millisecond, time.Second, 1), gpuprov.WithPlanCache(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); r.err = r.fl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
		if r.err != nil {
			t.Errorf("%s: Run: %v", owner, r.err)
		}
	})
	return r
}

// held reports whether every slot is ready with exactly one live instance in
// the cloud, the journaled one, and no other fleet instance is alive; else
// it says what is missing.
func held(j journal.Journal, srv *simserver.Server, n int) (bool, string) {
	ctx := context.Background()
	all, err := srv.Instances(simCloud)
	if err != nil {
		return false, err.Error()
	}
	live := map[string][]simserver.Instance{}
	alive := 0
	for _, in := range all {
		if in.Status == simserver.StatusTerminated || !strings.HasPrefix(in.Labels[provider.LabelVM], "fleet-") {
			continue
		}
		live[in.Labels[provider.LabelVM]] = append(live[in.Labels[provider.LabelVM]], in)
		alive++
	}
	for k := range n {
		name := fmt.Sprintf("fleet-%d", k)
		v, err := j.GetVM(ctx, name)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", name, err)
		}
		ins := live[name]
		if v.State != journal.StateReady || len(ins) != 1 || ins[0].Status != simserver.StatusRunning || ins[0].ID != v.InstanceID {
			return false, fmt.Sprintf("%s is %s (instance %q) with %d live instances", name, v.State, v.InstanceID, len(ins))
		}
	}
	if alive != n {
		return false, fmt.Sprintf("%d fleet instances alive, want %d", alive, n)
	}
	return true, ""
}

func waitHeld(t *testing.T, j journal.Journal, srv *simserver.Server, n int, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	var why string
	for time.Since(start) < within {
		var ok bool
		if ok, why = held(j, srv, n); ok {
			t.Logf("%s: %d machines held after %.1fs", what, n, time.Since(start).Seconds())
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: the fleet did not hold %d machines within %v: %s", what, n, within, why)
	return 0
}

// preempt reclaims up to k running fleet instances, as a spot reclaim would.
func preempt(t *testing.T, srv *simserver.Server, k int) []string {
	t.Helper()
	all, err := srv.Instances(simCloud)
	if err != nil {
		t.Fatal(err)
	}
	var hit []string
	for _, in := range all {
		if len(hit) == k {
			break
		}
		if in.Status == simserver.StatusRunning && strings.HasPrefix(in.Labels[provider.LabelVM], "fleet-") {
			if err := srv.Preempt(simCloud, in.ID); err != nil {
				t.Fatal(err)
			}
			hit = append(hit, in.Labels[provider.LabelVM])
		}
	}
	return hit
}

// TestFleetSurvivesReplicaDeath: two fleet replicas on one PostgreSQL
// journal hold N machines; instances are preempted, one replica dies in the
// middle of replacing them, and the survivor gets back to N machines, each
// with exactly one live instance, within bounded time; then holds N through
// another round of preemptions alone.
func TestFleetSurvivesReplicaDeath(t *testing.T) {
	const n = 10
	pg := pgtest.Require(t)
	url := pg.NewSchema(t)
	srv, err := simserver.Start(simserver.Options{DisableSSH: true, Clouds: []simserver.CloudConfig{{
		Name: simCloud, Offers: simserver.DefaultCatalog(simCloud), Timing: &simserver.Timing{
			APILatency: simserver.Duration(time.Millisecond), BootTime: simserver.Duration(400 * time.Millisecond),
			BootJitter: simserver.Duration(200 * time.Millisecond), DeleteTime: simserver.Duration(150 * time.Millisecond),
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	a := startReplica(t, url, srv, "replica-a", n)
	b := startReplica(t, url, srv, "replica-b", n)
	waitHeld(t, a.db, srv, n, 30*time.Second, "start")

	hit := preempt(t, srv, 4)
	// Kill replica-b while it drives VMs (replacing the preempted ones), so
	// the survivor must take them over once b's leases lapse.
	// The power goes off as soon as b is seen driving a VM; if that VM
	// was done in the moment between the look and the switch (launches
	// and deletes take milliseconds here), the power comes back and the
	// look goes on: b's drivers cut off meanwhile leave their VMs leased,
	// for Recover, like a crash.
	var orphaned []string
	var killedAt int64 // the journal's last event when b was seen driving them, its power off
	for deadline := time.Now().Add(10 * time.Second); len(orphaned) == 0 && time.Now().Before(deadline); {
		if len(drivenBy(t, b.db, b.fl)) > 0 {
			b.sw.Store(true)
			killedAt = lastSeq(t, b.db)
			seen := drivenBy(t, b.db, b.fl)
			// A write that was in flight as the power went off may still
			// land and end one of them: give it time to, and count only
			// what is still driven after.
			time.Sleep(200 * time.Millisecond)
			if orphaned = stillDriven(t, b.db, b.fl, seen, killedAt); len(orphaned) > 0 {
				break
			}
			b.sw.Store(false)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.sw.Store(true)
	b.cancel()
	<-b.done
	// As the kill left them: a write of b's in flight as the power went off
	// may still have ended one. (Reading b's leases again instead would race
	// a's Recover, which takes them over once they expire, while b's
	// drivers wind down.)
	orphaned = stillDriven(t, b.db, b.fl, orphaned, killedAt)
	t.Logf("preempted %v, then killed replica-b while it drove %v", hit, orphaned)
	waitHeld(t, a.db, srv, n, 30*time.Second, "after preemptions and a replica's death")
	if len(orphaned) == 0 {
		t.Errorf("replica-b drove no VM when it was killed: no takeover was tested")
	}
	for _, vm := range orphaned {
		evs, err := a.db.Events(context.Background(), journal.EventQuery{VM: vm})
		if err != nil {
			t.Fatal(err)
		}
		took := false
		for _, e := range evs {
			driver, rec := a.fl.Owners()
			took = took || (e.Type == gpuprov.EvRecovered && (e.Owner == driver || e.Owner == rec))
		}
		if !took {
			t.Errorf("%s: replica-b died driving it, and replica-a never recovered it", vm)
		}
	}

	hit = preempt(t, srv, 3)
	t.Logf("preempted %v", hit)
	waitHeld(t, a.db, srv, n, 20*time.Second, "after more preemptions, one replica left")

	if got := counterSum(t, a.m, "fleet_replacements_total"); got == 0 {
		t.Errorf("the survivor replaced no machine (fleet_replacements_total = 0)")
	}
	if got := histogramCount(t, a.m, "gpuprov_launch_duration_seconds"); got == 0 {
		t.Errorf("no launch latency was recorded")
	}
	// Read from the journal at scrape time: every slot is ready, nothing
	// else is live.
	if got := gaugeSumWhere(t, a.m, "gpuprov_vms", "state", "ready"); got != n {
		t.Errorf("gpuprov_vms{state=\"ready\"} = %v, want %d", got, n)
	}
	if got := gaugeSum(t, a.m, "gpuprov_vms"); got != n {
		t.Errorf("gpuprov_vms = %v in all states, want %d, all ready", got, n)
	}
	if got := counterSum(t, a.m, "gpuprov_recoveries_total"); len(orphaned) > 0 && got == 0 {
		t.Errorf("the survivor took over %v, and gpuprov_recoveries_total = 0", orphaned)
	}
	if got := counterSum(t, a.m, "gpuprov_attempts_total"); got == 0 {
		t.Errorf("the survivor started no attempt (gpuprov_attempts_total = 0)")
	}
	if got := gaugeSum(t, a.m, "fleet_target"); got != n {
		t.Errorf("fleet_target = %v, want %d", got, n)
	}
}

// drivenBy returns the active VMs whose lease a replica's Provisioners hold.
// lastSeq is the Seq of the journal's newest event.
func lastSeq(t *testing.T, j journal.Journal) int64 {
	t.Helper()
	evs, err := j.Events(context.Background(), journal.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// stillDriven is vms less those that fl's owners ended (ready, failed,
// deleted) in an event after seq.
func stillDriven(t *testing.T, j journal.Journal, fl *Fleet, vms []string, seq int64) []string {
	t.Helper()
	driver, rec := fl.Owners()
	var out []string
	for _, vm := range vms {
		evs, err := j.Events(context.Background(), journal.EventQuery{VM: vm, After: seq})
		if err != nil {
			t.Fatal(err)
		}
		ended := slices.ContainsFunc(evs, func(e journal.Event) bool {
			return (e.Owner == driver || e.Owner == rec) &&
				(e.Type == gpuprov.EvReady || e.Type == gpuprov.EvFailed || e.Type == gpuprov.EvDeleted)
		})
		if !ended {
			out = append(out, vm)
		}
	}
	return out
}

func drivenBy(t *testing.T, j journal.Journal, fl *Fleet) []string {
	t.Helper()
	vms, err := j.ListVMs(context.Background(), journal.ListOptions{States: []journal.VMState{
		journal.StatePending, journal.StateProvisioning, journal.StateDeleting}})
	if err != nil {
		t.Fatal(err)
	}
	driver, rec := fl.Owners()
	var out []string
	for _, v := range vms {
		if v.Owner == driver || v.Owner == rec {
			out = append(out, v.Name)
		}
	}
	return out
}

func family(t *testing.T, m *Metrics, name string) *dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry.Gather()
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

func counterSum(t *testing.T, m *Metrics, name string) float64 {
	s := 0.0
	for _, x := range family(t, m, name).GetMetric() {
		s += x.GetCounter().GetValue()
	}
	return s
}

func gaugeSum(t *testing.T, m *Metrics, name string) float64 {
	s := 0.0
	for _, x := range family(t, m, name).GetMetric() {
		s += x.GetGauge().GetValue()
	}
	return s
}

func gaugeSumWhere(t *testing.T, m *Metrics, name, label, value string) float64 {
	s := 0.0
	for _, x := range family(t, m, name).GetMetric() {
		for _, l := range x.GetLabel() {
			if l.GetName() == label && l.GetValue() == value {
				s += x.GetGauge().GetValue()
			}
		}
	}
	return s
}

func histogramCount(t *testing.T, m *Metrics, name string) uint64 {
	var s uint64
	for _, x := range family(t, m, name).GetMetric() {
		s += x.GetHistogram().GetSampleCount()
	}
	return s
}
