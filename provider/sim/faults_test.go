package sim_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/sim"
	"github.com/org/gpuprov/provider/sim/simserver"
)

func TestCreateFaultsMapToKinds(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	of := e.offer(t, h100)
	for _, tc := range []struct {
		name       string
		faults     simserver.Faults
		kind       provider.ErrorKind
		scope      provider.Scope
		retryAfter time.Duration
	}{
		{"stockout offer", simserver.Faults{StockoutOffers: []string{"a-h100x1-use1a"}}, provider.Capacity, provider.ScopeOffer, 0},
		{"stockout region", simserver.Faults{StockoutRegions: []string{"us-east"}}, provider.Capacity, provider.ScopeOffer, 0},
		{"quota region", simserver.Faults{QuotaRegions: []string{"*"}}, provider.Quota, provider.ScopeRegion, 0},
		{"insufficient funds", simserver.Faults{InsufficientFunds: true}, provider.Quota, provider.ScopeProvider, 0},
		{"429", simserver.Faults{ThrottleRate: 1, RetryAfter: simserver.Duration(2 * time.Second)}, provider.Transient, provider.ScopeOffer, 2 * time.Second},
		{"5xx", simserver.Faults{ErrorRate: 1}, provider.Transient, provider.ScopeOffer, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.setFaults(t, tc.faults)
			spec, _ := newSpec(t, "vm1")
			_, err := e.p.Create(ctx, &of, nil, spec)
			pe := errKind(t, err, tc.kind)
			if pe.Scope() != tc.scope || pe.RetryAfter != tc.retryAfter || pe.Op != "create" || pe.Provider != cloudName {
				t.Fatalf("error %+v: scope %s, retry after %s", pe, pe.Scope(), pe.RetryAfter)
			}
			var apiErr *sim.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("%v does not wrap an *sim.APIError", err)
			}
			e.setFaults(t, simserver.Faults{})
			if obs := e.observe(t, of.Location, "vm1"); len(obs) != 0 {
				t.Fatalf("a failed create left %+v", obs)
			}
		})
	}

	t.Run("instance quota", func(t *testing.T) {
		e.setFaults(t, simserver.Faults{InstanceQuota: 1})
		a, _ := newSpec(t, "qa")
		e.launch(t, a)
		b, _ := newSpec(t, "qb")
		_, err := e.p.Create(ctx, &of, nil, b)
		errKind(t, err, provider.Quota)
	})
	t.Run("wrong key", func(t *testing.T) {
		p, _ := newProvider(t, e.srv, sim.Config{APIKey: "wrong"})
		_, err := p.Plan(ctx, &h100)
		errKind(t, err, provider.Credentials)
	})
}

func TestRateLimitTokenBucket(t *testing.T) {
	e := newEnv(t, func(o *simserver.Options) {
		o.Clouds[0].Faults = simserver.Faults{RateLimit: 0.5, RateBurst: 2}
	})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := e.p.Plan(ctx, &h100); err != nil {
			t.Fatalf("call %d inside the burst: %v", i, err)
		}
	}
	_, err := e.p.Plan(ctx, &h100)
	if pe := errKind(t, err, provider.Transient); pe.RetryAfter != 2*time.Second {
		t.Fatalf("retry after %s, want 2s (one token at 0.5/s)", pe.RetryAfter)
	}
	e.clk.Advance(2 * time.Second)
	if _, err := e.p.Plan(ctx, &h100); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
	if st, _ := e.srv.Stats(cloudName); st.RateLimited != 1 || st.Calls["list_offers"] != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAPITimeoutIsTransientNotTheCallersDeadline(t *testing.T) {
	e := newEnv(t, func(o *simserver.Options) {
		o.Clouds[0].Faults = simserver.Faults{TimeoutRate: 1, Ops: []string{"list_instances"}}
	})
	p, _ := newProvider(t, e.srv, sim.Config{RequestTimeout: 100 * time.Millisecond})
	_, err := p.Observe(context.Background(), provider.Location{Region: "us-east"}, "vm1")
	errKind(t, err, provider.Transient)
	if !errors.Is(err, sim.ErrRequestTimeout) || provider.IsContextError(err) {
		t.Fatalf("%v: want ErrRequestTimeout and no context error", err)
	}
	// Other calls are not held.
	if _, err := p.Plan(context.Background(), &h100); err != nil {
		t.Fatal(err)
	}
}

func TestLostCreateLandsAndShowsAfterListingLag(t *testing.T) {
	for _, mode := range []string{"error", "drop"} {
		t.Run(mode, func(t *testing.T) {
			const lag = 5 * time.Second
			e := newEnv(t, nil)
			e.setFaults(t, simserver.Faults{LostCreateRate: 1, LostCreateMode: mode, ListingLag: simserver.Duration(lag)})
			ctx := context.Background()
			spec, _ := newSpec(t, "vm1")
			of := e.offer(t, h100)
			_, err := e.p.Create(ctx, &of, nil, spec)
			errKind(t, err, provider.Transient)
			if obs := e.observe(t, of.Location, "vm1"); len(obs) != 0 {
				t.Fatalf("visible before the listing lag: %+v", obs)
			}
			e.clk.Advance(lag)
			landed := one(t, e.observe(t, of.Location, "vm1"))
			// A replay with the same token adopts it rather than launching another.
			e.setFaults(t, simserver.Faults{})
			id, err := e.p.Create(ctx, &of, nil, spec)
			if err != nil || id != landed.ID {
				t.Fatalf("replayed create: %s, %v; want %s", id, err, landed.ID)
			}
			if st, _ := e.srv.Stats(cloudName); st.LostCreates != 1 || st.Creates != 1 || st.IdempotentReplays != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestBootFailureIsFailedAndDiagnosed(t *testing.T) {
	e := newEnv(t, nil)
	e.setFaults(t, simserver.Faults{BootFailOffers: []string{"a-h100x1-use1a"}})
	spec, _ := newSpec(t, "vm1")
	of, id := e.launch(t, spec)
	e.clk.Advance(bootTime)
	if o := one(t, e.observe(t, of.Location, "vm1")); o.Status != provider.StatusFailed || o.VendorStatus != "failed" {
		t.Fatalf("after a failed boot: %+v", o)
	}
	d, err := e.p.Diagnose(context.Background(), of.Location, "vm1", id)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Exists || d.Verdict() != provider.Unhealthy || len(d.Findings) != 1 || d.Findings[0].Code != "boot-failed" ||
		d.Findings[0].Severity != provider.Critical || d.Findings[0].Message == "" {
		t.Fatalf("diagnosis %+v", d)
	}
}

func TestSlowDeleteStaysStopping(t *testing.T) {
	e := newEnv(t, nil)
	e.setFaults(t, simserver.Faults{SlowDelete: simserver.Duration(10 * time.Second)})
	spec, _ := newSpec(t, "vm1")
	of, id := e.launch(t, spec)
	if err := e.p.Delete(context.Background(), of.Location, "vm1", []string{id}); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(10 * time.Second)
	if o := one(t, e.observe(t, of.Location, "vm1")); o.Status != provider.StatusStopping {
		t.Fatalf("10s into an 11s delete: %+v", o)
	}
	e.clk.Advance(deleteTime)
	if obs := e.observe(t, of.Location, "vm1"); len(obs) != 0 {
		t.Fatalf("after the slow delete: %+v", obs)
	}
}

func TestPreemption(t *testing.T) {
	t.Run("on demand", func(t *testing.T) {
		e := newEnv(t, nil)
		spec, _ := newSpec(t, "vm1")
		of, id := e.launch(t, spec)
		e.clk.Advance(bootTime)
		if err := e.srv.Preempt(cloudName, id); err != nil {
			t.Fatal(err)
		}
		checkPreempted(t, e, of.Location, id)
	})
	t.Run("by probability", func(t *testing.T) {
		e := newEnv(t, nil)
		e.setFaults(t, simserver.Faults{PreemptionRate: 1, PreemptWithin: simserver.Duration(5 * time.Second)})
		spec, _ := newSpec(t, "vm1")
		of, id := e.launch(t, spec)
		e.clk.Advance(bootTime)
		if o := one(t, e.observe(t, of.Location, "vm1")); o.Status != provider.StatusRunning {
			t.Fatalf("before the preemption: %+v", o)
		}
		e.clk.Advance(5 * time.Second)
		checkPreempted(t, e, of.Location, id)
	})
}

// checkPreempted asserts what a preempted instance looks like: Failed while
// the cloud still lists it, then gone, and Diagnose attributes it.
func checkPreempted(t *testing.T, e *env, loc provider.Location, id string) {
	t.Helper()
	if o := one(t, e.observe(t, loc, "vm1")); o.Status != provider.StatusFailed || o.VendorStatus != "preempted" || o.SSH != nil {
		t.Fatalf("just preempted: %+v", o)
	}
	e.clk.Advance(deleteTime)
	if obs := e.observe(t, loc, "vm1"); len(obs) != 0 {
		t.Fatalf("preempted instance still observed: %+v", obs)
	}
	d, err := e.p.Diagnose(context.Background(), loc, "vm1", id)
	if err != nil {
		t.Fatal(err)
	}
	if d.Exists || d.Status != provider.StatusTerminated || len(d.Findings) == 0 || d.Findings[0].Code != "preempted" ||
		d.Findings[0].Severity != provider.Critical || d.Findings[0].Message == "" {
		t.Fatalf("diagnosis %+v", d)
	}
}
