package gpuprov_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// rankEnv: one cloud with a cheap offer that fails acceptance half the
// time and a dearer one that always works, and that history in the
// journal: 10 creates each, both ready in 2 minutes when they work, the
// cheap one's failures billed 10 minutes each.
func rankEnv(t *testing.T) (*env, provider.Offer, provider.Offer) {
	t.Helper()
	e := newEnv(t)
	a := e.fake("a")
	cheap := pt.Offer("us-east", "us-east-1a", "h100.cheap", "H100-80GB", 1, 2.00)
	good := pt.Offer("us-east", "us-east-1a", "h100.good", "H100-80GB", 1, 2.10)
	a.Offers = []provider.Offer{cheap, good}
	cheap.Provider, good.Provider = "a", "a"
	var outs []journal.Outcome
	at := e.clk.Now()
	add := func(o provider.Offer, kind journal.OutcomeKind, d time.Duration) {
		outs = append(outs, journal.Outcome{OfferKey: o.Key(), Provider: "a", Region: "us-east", Zone: "us-east-1a",
			InstanceType: o.InstanceType, Kind: kind, Elapsed: d, At: at})
	}
	for i := 0; i < 10; i++ {
		add(cheap, journal.OutcomeCreated, 0)
		add(good, journal.OutcomeCreated, 0)
		add(good, journal.OutcomeReady, 2*time.Minute)
		if i%2 == 0 {
			add(cheap, journal.OutcomeReady, 2*time.Minute)
		} else {
			add(cheap, journal.OutcomeAcceptanceFailed, 10*time.Minute)
		}
	}
	if err := e.j.Commit(context.Background(), &journal.Step{Outcomes: outs}); err != nil {
		t.Fatal(err)
	}
	return e, cheap, good
}

// TestRankByExpectedCost: by list price the cheap offer comes first; by
// expected cost the one that works does, and the plan says why (success
// rate, expected time to a usable machine, cost over the horizon, as the
// documented formula gives them); a launch ranked so lands on it.
func TestRankByExpectedCost(t *testing.T) {
	ctx := context.Background()
	e, cheap, good := rankEnv(t)
	req := h100("vm")
	byPrice, err := e.p.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if byPrice.Offers[0].Key() != cheap.Key() {
		t.Errorf("by price, first is %s", byPrice.Offers[0].Key())
	}
	req.Rank = gpuprov.RankExpectedCost
	byCost, err := e.p.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if byCost.Offers[0].Key() != good.Key() || byPrice.Offers[0].Key() != cheap.Key() {
		t.Fatalf("by expected cost, first is %s (and the cached plan by price now starts with %s)", byCost.Offers[0].Key(), byPrice.Offers[0].Key())
	}
	// The cheap offer: 5 of 10 ready (with the prior: 6/11), 2 min to
	// ready, 10 min billed per failure: E[T] = 2m + 10m × (5/11)/(6/11).
	x := byCost.Expected[cheap.Key()]
	p := 6.0 / 11
	et := 2*time.Minute + time.Duration(float64(10*time.Minute)*(1-p)/p)
	if !x.Known || math.Abs(x.Success-p) > 1e-9 || !near(x.TimeToReady, et, 0.12) ||
		math.Abs(x.CostUSD-2.00*(x.TimeToReady+time.Hour).Hours()) > 1e-9 {
		t.Errorf("cheap: %+v; want success %.3f, time to usable ≈ %v", x, p, et)
	}
	if h := byCost.History[cheap.Key()]; h.Created != 10 || h.Ready != 5 || h.AcceptanceFailed != 5 {
		t.Errorf("cheap's history: %+v", h)
	}
	if y := byCost.Expected[good.Key()]; y.Success != 1 || !near(y.TimeToReady, 2*time.Minute, 0.12) || y.CostUSD >= x.CostUSD {
		t.Errorf("good: %+v against cheap %+v", y, x)
	}
	vm, err := e.p.Launch(ctx, req)
	if err != nil || vm.InstanceType != "h100.good" {
		t.Fatalf("launch by expected cost: %v on %+v", err, vm)
	}
}

// TestRankHorizon: over a long horizon the hourly price outweighs a few
// minutes of failures, and the cheap offer is first again.
func TestRankHorizon(t *testing.T) {
	e, cheap, _ := rankEnv(t)
	req := h100("vm")
	req.Rank, req.RankHorizon = gpuprov.RankExpectedCost, 100*time.Hour
	res, err := e.p.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Offers[0].Key() != cheap.Key() {
		t.Errorf("over 100 h the first offer is %s", res.Offers[0].Key())
	}
}

// near reports whether got is within frac of want (the history's
// percentiles come from a histogram).
func near(got, want time.Duration, frac float64) bool {
	return math.Abs(float64(got-want)) <= frac*float64(want)
}

// TestAcceptanceAndRankRequestErrors: bad acceptance or rank settings are
// refused before anything is journaled, naming the field.
func TestAcceptanceAndRankRequestErrors(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		set   func(r *gpuprov.Request)
		field string
	}{
		{func(r *gpuprov.Request) { r.Acceptance.DCGM = 3 }, "acceptance.dcgm"},
		{func(r *gpuprov.Request) { r.Acceptance.Ignore = []string{"links"} }, "acceptance.ignore"},
		{func(r *gpuprov.Request) { r.Acceptance.Command = string(make([]byte, gpuprov.MaxAcceptanceCommand+1)) }, "acceptance.command"},
		{func(r *gpuprov.Request) { r.Rank = "cheapest" }, "rank"},
		{func(r *gpuprov.Request) { r.RankHorizon = -time.Hour }, "rank_horizon"},
	} {
		req := h100("bad")
		tc.set(&req)
		_, err := e.p.Launch(context.Background(), req)
		var re *gpuprov.RequestError
		if !errors.As(err, &re) || re.Field != tc.field {
			t.Errorf("%s: %v", tc.field, err)
		}
	}
	if vms, _ := e.j.ListVMs(context.Background(), journal.ListOptions{}); len(vms) != 0 {
		t.Errorf("refused requests journaled %d VMs", len(vms))
	}
	if n := len(e.fake("a").Calls(pt.OpCreate)); n != 0 {
		t.Errorf("%d creates", n)
	}
}
