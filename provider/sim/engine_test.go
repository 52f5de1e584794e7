package sim_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/journal/sqlite"
	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

// engineEnv is a Provisioner driving the sim adapter against an in-process
// sim server, both on one fake clock that runs the engine's waits at once.
type engineEnv struct {
	*env
	j      journal.Journal
	p      *gpuprov.Provisioner
	mu     sync.Mutex
	events []gpuprov.Event
}

func newEngineEnv(t *testing.T, faults simserver.Faults, cfg sim.Config, opts ...gpuprov.Option) *engineEnv {
	t.Helper()
	return newEngineEnvOf(t, nil, faults, cfg, opts...)
}

// newEngineEnvOf is newEngineEnv with the cloud's configuration adjusted
// by cloud (reservations, quotas, offers) before the server starts.
func newEngineEnvOf(t *testing.T, cloud func(*simserver.CloudConfig), faults simserver.Faults, cfg sim.Config, opts ...gpuprov.Option) *engineEnv {
	t.Helper()
	e := &engineEnv{env: newEnv(t, func(o *simserver.Options) {
		o.DisableSSH = true
		if cloud != nil {
			cloud(&o.Clouds[0])
		}
	})}
	stop := e.clk.AutoAdvance()
	t.Cleanup(stop)
	e.setFaults(t, faults)
	if cfg.ConsistencyWindow == 0 {
		cfg.ConsistencyWindow = 10 * time.Second
	}
	cfg.PollInterval = time.Second
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// The adapter's identity must be the journal's.
	p, _ := newProviderWithInstallation(t, e.srv, cfg, db.Installation(), e.clk)
	e.j = db
	e.p, err = gpuprov.New(db, append([]gpuprov.Option{gpuprov.WithProvider(p), gpuprov.WithClock(e.clk),
		gpuprov.WithBackoff(100*time.Millisecond, 2*time.Second, 1),
		gpuprov.WithEvents(func(ev gpuprov.Event) { e.mu.Lock(); e.events = append(e.events, ev); e.mu.Unlock() })},
		opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.p.Close() })
	return e
}

func newProviderWithInstallation(t *testing.T, srv *simserver.Server, cfg sim.Config, inst string, clk clock.Clock) (*sim.Provider, error) {
	t.Helper()
	cfg.Endpoint, cfg.Cloud, cfg.APIKey = srv.URL(), cloudName, srv.APIKey(cloudName)
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = 5 * time.Second
	}
	p, err := sim.New(cfg, sim.WithName(cloudName), sim.WithInstallation(inst), sim.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return p, nil
}

func (e *engineEnv) has(vm, typ string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.events, func(ev gpuprov.Event) bool { return ev.VM == vm && ev.Type == typ })
}

// live returns the sim's instances of vm that are not terminated.
func (e *engineEnv) live(t *testing.T, vm string) []simserver.Instance { return liveOf(t, e.srv, vm) }

// liveOf returns srv's instances (of sim-a) of vm that are not terminated.
func liveOf(t *testing.T, srv *simserver.Server, vm string) []simserver.Instance {
	t.Helper()
	all, err := srv.Instances(cloudName)
	if err != nil {
		t.Fatal(err)
	}
	var out []simserver.Instance
	for _, in := range all {
		if in.Labels[provider.LabelVM] == vm && in.Status != simserver.StatusTerminated {
			out = append(out, in)
		}
	}
	return out
}

func (e *engineEnv) blockKeys(t *testing.T) []string {
	bs, err := e.j.Blocks(context.Background(), e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, b := range bs {
		keys = append(keys, b.Key)
	}
	return keys
}

func engineReq(name string) gpuprov.Request {
	return gpuprov.Request{Name: name, GPU: "H100-80GB", Timeout: time.Hour}
}

// TestEngineThroughEveryFault shows, for each fault the sim can inject, what
// the engine does about it through the sim adapter.
func TestEngineThroughEveryFault(t *testing.T) {
	ctx := context.Background()
	type check func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error)
	ready := func(region string) check {
		return func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("launch: %v", err)
			}
			if vm.Location.Region != region {
				t.Fatalf("ready in %s, want %s", vm.Location.Region, region)
			}
			if live := e.live(t, vm.Name); len(live) != 1 || live[0].ID != vm.InstanceID {
				t.Fatalf("ready VM %s (%s) has live instances %+v", vm.Name, vm.InstanceID, live)
			}
		}
	}
	both := func(cs ...check) check {
		return func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
			for _, c := range cs {
				c(t, e, vm, err)
			}
		}
	}
	blocked := func(key string) check {
		return func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
			if keys := e.blockKeys(t); !slices.Contains(keys, key) {
				t.Fatalf("blocks %v lack %s", keys, key)
			}
		}
	}
	stat := func(name string, min func(simserver.Stats) int) check {
		return func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
			st, serr := e.srv.Stats(cloudName)
			if serr != nil {
				t.Fatal(serr)
			}
			if min(st) == 0 {
				t.Fatalf("the sim reports no %s: the fault did not fire (%+v)", name, st)
			}
		}
	}
	event := func(typ string) check {
		return func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
			if !e.has("vm", typ) {
				t.Fatalf("no %s event", typ)
			}
		}
	}
	replayed := both(stat("idempotent replays", func(s simserver.Stats) int { return s.IdempotentReplays }),
		func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
			if e.has("vm", gpuprov.EvAdopted) {
				t.Fatal("adopted: the lost create was looked for instead of replayed")
			}
		})
	cases := []struct {
		name   string
		faults simserver.Faults
		cfg    sim.Config
		check  check
	}{
		{"stockout: next offer, offer blocked", simserver.Faults{StockoutOffers: []string{"a-h100x1-use1a"}},
			sim.Config{}, both(ready("eu-west"), blocked("offer:sim-a|us-east|us-east-1a|gpu.h100.1x|od"))},
		{"quota: region blocked", simserver.Faults{QuotaRegions: []string{"us-east"}},
			sim.Config{}, both(ready("eu-west"), blocked("region:sim-a|us-east"))},
		{"429 with Retry-After: retried", simserver.Faults{ThrottleRate: 0.4, RetryAfter: simserver.Duration(2 * time.Second)},
			sim.Config{}, both(ready("us-east"), stat("429s", func(s simserver.Stats) int { return s.RateLimited }))},
		{"5xx: retried", simserver.Faults{ErrorRate: 0.4},
			sim.Config{}, both(ready("us-east"), stat("5xx", func(s simserver.Stats) int { return s.Errors["internal"] + s.Errors["unavailable"] }))},
		{"timeouts: retried, creates observed first", simserver.Faults{TimeoutRate: 0.3, TimeoutHold: simserver.Duration(time.Minute)},
			sim.Config{RequestTimeout: 200 * time.Millisecond}, both(ready("us-east"), stat("timeouts", func(s simserver.Stats) int { return s.Timeouts }))},
		// A lost answer to a create is replayed with the same token at
		// once, listing lag or not: the sim answers the replay with the
		// instance the first create made.
		{"lost create response: replayed with its token, not duplicated", simserver.Faults{LostCreateRate: 1},
			sim.Config{}, both(ready("us-east"), replayed)},
		{"lost create behind listing lag: replayed with its token, not duplicated", simserver.Faults{LostCreateRate: 1, ListingLag: simserver.Duration(6 * time.Second)},
			sim.Config{ConsistencyWindow: 10 * time.Second}, both(ready("us-east"), replayed)},
		// Without tokens, only observing tells.
		{"lost create, no tokens: adopted", simserver.Faults{LostCreateRate: 1},
			sim.Config{NoIdempotencyToken: true}, both(ready("us-east"), event(gpuprov.EvAdopted))},
		{"lost create, no tokens, listing lag: adopted after the lag", simserver.Faults{LostCreateRate: 1, ListingLag: simserver.Duration(4 * time.Second)},
			sim.Config{NoIdempotencyToken: true, ConsistencyWindow: 10 * time.Second}, both(ready("us-east"), event(gpuprov.EvAdopted))},
		{"boot failure: torn down, next offer", simserver.Faults{BootFailOffers: []string{"a-h100x1-use1a"}},
			sim.Config{}, both(ready("eu-west"), event(gpuprov.EvTornDown))},
		{"insufficient funds: provider blocked, launch fails clean", simserver.Faults{InsufficientFunds: true},
			sim.Config{}, func(t *testing.T, e *engineEnv, vm *gpuprov.VM, err error) {
				if !errors.Is(err, gpuprov.ErrNoOffers) {
					t.Fatalf("err %v, want ErrNoOffers after the provider was blocked", err)
				}
				blocked("provider:sim-a")(t, e, vm, err)
				if live := e.live(t, "vm"); len(live) != 0 {
					t.Fatalf("live %+v", live)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEngineEnv(t, c.faults, c.cfg)
			vm, err := e.p.Launch(ctx, engineReq("vm"))
			c.check(t, e, vm, err)
		})
	}
}

func TestEngineSlowDeleteWaitsUntilGone(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{SlowDelete: simserver.Duration(45 * time.Second)}, sim.Config{})
	if _, err := e.p.Launch(context.Background(), engineReq("vm")); err != nil {
		t.Fatal(err)
	}
	start := e.clk.Now()
	if err := e.p.Delete(context.Background(), "vm"); err != nil {
		t.Fatal(err)
	}
	if waited := e.clk.Now().Sub(start); waited < 45*time.Second {
		t.Fatalf("Delete returned after %v; the instance stays stopping for 45s", waited)
	}
	if live := e.live(t, "vm"); len(live) != 0 {
		t.Fatalf("live after delete: %+v", live)
	}
	e.p.Close() // removes the shared firewall waiting out its grace
	res, err := e.srv.SideResources(cloudName)
	if err != nil || len(res.Firewalls)+len(res.SSHKeys) != 0 {
		t.Fatalf("side resources after delete: %+v %v", res, err)
	}
}

func TestEnginePreemptionShowsInHealth(t *testing.T) {
	e := newEngineEnv(t, simserver.Faults{}, sim.Config{})
	vm, err := e.p.Launch(context.Background(), engineReq("vm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Preempt(cloudName, vm.InstanceID); err != nil {
		t.Fatal(err)
	}
	d, err := e.p.Health(context.Background(), "vm")
	if err != nil {
		t.Fatal(err)
	}
	if v := d.Verdict(); v != provider.Unhealthy && v != provider.Gone {
		t.Fatalf("verdict %s after preemption: %+v", v, d)
	}
	if !slices.ContainsFunc(d.Findings, func(f provider.Finding) bool { return f.Code == "preempted" }) {
		t.Fatalf("no preempted finding: %+v", d.Findings)
	}
	// The preemption is journaled once, and counted once in its offer's
	// history, however often Health sees it.
	if _, err := e.p.Health(context.Background(), "vm"); err != nil {
		t.Fatal(err)
	}
	n := 0
	evs, _ := e.j.Events(context.Background(), journal.EventQuery{VM: "vm"})
	for _, ev := range evs {
		if ev.Type == gpuprov.EvPreempted {
			n++
		}
	}
	stats, err := e.j.(journal.OfferHistory).OfferStats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var preempted int64
	for _, s := range stats {
		preempted += s.Preempted
		if s.Preempted > 0 && s.Wasted <= 0 {
			t.Errorf("a preemption without its billed time: %+v", s)
		}
	}
	if n != 1 || preempted != 1 {
		t.Errorf("%d preempted events, %d preemptions in the history; want 1 and 1", n, preempted)
	}
}

// The engine paces its calls to the account's limit: launched through a
// server that answers 429 above 10 requests per second (burst 5), six VMs
// get no 429, where the same launches unpaced draw several.
//
// This test runs on the real clock. On the auto-advancing fake clock the
// client's bucket and the server's see different instants: virtual time
// jumps to the next sleeper while a released request is still on its way,
// so two requests spaced by the client arrive at one virtual instant and
// the second draws a 429 about once in ten runs. On loopback a request
// arrives within microseconds, and the client's burst (4) is one below the
// server's, which absorbs up to 100 ms of arrival jitter.
func TestEngineRespectsTheRateLimit(t *testing.T) {
	launch := func(t *testing.T, rps float64) simserver.Stats {
		srv := simserver.NewServer(t, simserver.WithoutSSH(), simserver.WithTiming(simserver.Timing{}),
			simserver.WithFaults(cloudName, simserver.Faults{RateLimit: 10, RateBurst: 5}))
		db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "journal.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		p, err := sim.New(sim.Config{Endpoint: srv.URL(), Cloud: cloudName, APIKey: srv.APIKey(cloudName),
			RequestsPerSecond: rps, Burst: 4, PollInterval: 100 * time.Millisecond, ConsistencyWindow: time.Second},
			sim.WithName(cloudName))
		if err != nil {
			t.Fatal(err)
		}
		prov, err := gpuprov.New(db, gpuprov.WithProvider(p), gpuprov.WithBackoff(100*time.Millisecond, time.Second, 1))
		if err != nil {
			t.Fatal(err)
		}
		defer prov.Close()
		var reqs []gpuprov.Request
		for i := range 6 {
			reqs = append(reqs, engineReq(fmt.Sprintf("vm-%d", i)))
		}
		for _, r := range prov.LaunchMany(context.Background(), reqs) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		st, err := srv.Stats(cloudName)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := launch(t, 0); st.RateLimited == 0 {
		t.Fatalf("unpaced launches drew no 429 (%+v): the limit is not exercised", st)
	}
	if st := launch(t, 10); st.RateLimited != 0 {
		t.Fatalf("%d calls answered 429 although the calls are paced to the limit (%+v)", st.RateLimited, st)
	}
}
