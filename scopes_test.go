package gpuprov_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// scopeFakes: one cloud with two GPU types in one zone, on-demand and Spot,
// in two families, and a second region; a zonal stockout of one type or a
// Spot-only quota must leave the rest open.
func scopeFakes(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	a := e.fake("a")
	mk := func(region, zone, typ, family string, spot bool, price float64) provider.Offer {
		o := pt.Offer(region, zone, typ, "H100-80GB", 1, price)
		o.Family, o.Spot = family, spot
		return o
	}
	a.Offers = []provider.Offer{
		mk("us-east", "us-east-1a", "h100.spot", "p5", true, 1.00),
		mk("us-east", "us-east-1a", "h100.1", "p5", false, 2.00),
		mk("us-east", "us-east-1a", "h100.nd", "nd", false, 2.05),
		mk("us-east", "us-east-1b", "h100.1", "p5", false, 2.10),
		mk("eu-west", "eu-west-1a", "h100.spot", "p5", true, 3.00),
	}
	return e
}

// TestBlockScopes: a block covers what the error names and nothing more — a
// stockout of one type in a zone leaves the other type in that zone open, a
// Spot-only quota leaves on-demand open in the region, a family quota leaves
// another family open — and an error's BlockFor sets the block's length.
func TestBlockScopes(t *testing.T) {
	ctx := context.Background()
	type want struct {
		offer string // where the VM lands
		block string
		for_  time.Duration
	}
	for _, tc := range []struct {
		name  string
		match string // offer key prefix the rule refuses
		err   *provider.Error
		spot  provider.SpotPolicy
		want  want
	}{
		{"a stockout of one type leaves the other type in the zone", "a|us-east|us-east-1a|h100.1|od",
			&provider.Error{Kind: provider.Capacity, Op: "create", Provider: "a", Err: errors.New("ZonalResourceExhausted for h100.1")},
			provider.OnDemand, want{"a|us-east|us-east-1a|h100.nd|od", "offer:a|us-east|us-east-1a|h100.1|od", 0}},
		{"a Spot-only quota leaves on-demand in the region", "a|us-east|us-east-1a|h100.spot|spot",
			&provider.Error{Kind: provider.Quota, Op: "create", Provider: "a", Err: errors.New("LowPriorityCores"), Block: provider.ScopeSpot},
			provider.SpotOrOnDemand, want{"a|us-east|us-east-1a|h100.1|od", "spot:a|us-east", 0}},
		{"a family quota leaves the other family", "a|us-east|us-east-1a|h100.1|od",
			&provider.Error{Kind: provider.Quota, Op: "create", Provider: "a", Err: errors.New("family quota"), Block: provider.ScopeFamily},
			provider.OnDemand, want{"a|us-east|us-east-1a|h100.nd|od", "family:a|us-east|p5|od", 0}},
		{"BlockFor sets the length", "a|us-east|us-east-1a|h100.1|od",
			&provider.Error{Kind: provider.Unavailable, Op: "create", Provider: "a", Err: errors.New("SkuNotAvailable"), BlockFor: 23 * time.Hour},
			provider.OnDemand, want{"a|us-east|us-east-1a|h100.nd|od", "offer:a|us-east|us-east-1a|h100.1|od", 23 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := scopeFakes(t)
			e.fake("a").Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Offer == tc.match }, Err: tc.err})
			req := h100("vm")
			req.Spot, req.Providers = tc.spot, []string{"a"}
			vm, err := e.p.Launch(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var at string
			for _, c := range e.fake("a").Calls(pt.OpCreate) {
				if c.Err == nil {
					at = c.Offer
				}
			}
			if vm.Provider != "a" || at != tc.want.offer {
				t.Errorf("landed on %s, want %s", at, tc.want.offer)
			}
			blocks, err := e.j.Blocks(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, b := range blocks {
				keys = append(keys, b.Key)
				if b.Key == tc.want.block && tc.want.for_ != 0 {
					if got := b.Until.Sub(b.CreatedAt); got != tc.want.for_ {
						t.Errorf("block %s lasts %v, want %v", b.Key, got, tc.want.for_)
					}
				}
			}
			if !slices.Equal(keys, []string{tc.want.block}) {
				t.Errorf("blocks %v, want [%s]", keys, tc.want.block)
			}
		})
	}
}

// TestSourceRanges: a request's source ranges are checked before anything is
// journaled, reach Prepare and Create, and leave out a provider that cannot
// restrict who connects, with the reason.
func TestSourceRanges(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for _, tc := range []struct {
		ranges []string
		want   string
	}{
		{[]string{"203.0.113.0/24", "office"}, `"office" is not a CIDR`},
		{[]string{"203.0.113.7/24"}, "did you mean 203.0.113.0/24"},
		{[]string{"203.0.113.7"}, "not a CIDR"},
	} {
		req := h100("fenced")
		req.SourceRanges = tc.ranges
		_, err := e.p.Launch(ctx, req)
		var re *gpuprov.RequestError
		if !errors.As(err, &re) || re.Field != "source_ranges" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("source ranges %v: %v; want a source_ranges RequestError saying %q", tc.ranges, err, tc.want)
		}
	}
	if _, err := e.j.GetVM(ctx, "fenced"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("a refused request was journaled: %v", err)
	}

	e.fake("a").Caps.Unsupported = append(e.fake("a").Caps.Unsupported, provider.FeatureSourceRanges)
	e.p = e.provisioner(e.j) // capabilities are read when a provider is added
	req := h100("fenced")
	req.SourceRanges = []string{"203.0.113.0/24"}
	res, err := e.p.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if perr := res.Errors["a"]; perr == nil || !strings.Contains(perr.Error(), "cannot restrict who may connect") {
		t.Errorf("provider a (no source ranges) was not left out with the reason: %v", res.Errors)
	}
	vm, err := e.p.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Provider != "b" {
		t.Fatalf("launched on %s; only b can restrict its sources", vm.Provider)
	}
	for _, c := range e.fake("b").Calls(pt.OpPrepare, pt.OpCreate) {
		if !slices.Equal(c.Sources, req.SourceRanges) {
			t.Errorf("%s on b got sources %v, want %v", c.Op, c.Sources, req.SourceRanges)
		}
	}
}

// TestPlanErrorsNameTheProviderOnce: a provider's failed Plan is reported
// with its name once, whether every provider failed or only some did (the
// *provider.Error names its provider already).
func TestPlanErrorsNameTheProviderOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.fake("a").Script(&pt.Rule{Op: pt.OpPlan, Err: provider.Errorf(provider.Credentials, "a", "plan", "HTTP 401 unauthorized")})
	cheap := h100("x")
	cheap.MaxPricePerHour = 0.5 // below b's offer: no offer fits
	if _, err := e.p.Launch(ctx, cheap); err == nil ||
		!strings.Contains(err.Error(), "plan failed on a: plan: credentials: HTTP 401") || strings.Contains(err.Error(), "a: a:") {
		t.Errorf("launch with no offer: %v; want the plan error of a named once", err)
	}
	e.fake("b").Script(&pt.Rule{Op: pt.OpPlan, Err: errors.New("connection refused")})
	e.p = e.provisioner(e.j) // a fresh plan cache
	_, err := e.p.Plan(ctx, h100("y"))
	want := "every provider's Plan failed: a: plan: credentials: HTTP 401 unauthorized\nb: connection refused"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Plan with every provider failing: %v; want %q", err, want)
	}
}

// TestReadyLiftsTheStockoutBlock: an offer blocked for a stockout on which a
// VM then becomes ready (a waiting launch saw it back in stock) is no longer
// blocked: the next launch takes it at once instead of waiting out the
// block, and the journal (which the active-blocks gauge reads) holds no
// block on it.
func TestReadyLiftsTheStockoutBlock(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a := e.fake("a")
	first := a.Offers[0].Key()
	a.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Offer == first }, Err: pe(provider.Capacity, "none"), Times: 1})
	if _, err := e.p.Launch(ctx, h100("one")); err != nil {
		t.Fatal(err)
	}
	offerBlocked := func() bool {
		blocks, err := e.j.Blocks(ctx, e.clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(blocks, func(b journal.Block) bool { return b.Key == "offer:"+first })
	}
	if !offerBlocked() {
		t.Fatalf("the stockout did not block %s", first)
	}
	restocked := slices.Clone(a.Offers)
	restocked[0].InStock = true
	a.SetOffers(restocked...)
	e.clk.Advance(time.Second)
	e.p = e.provisioner(e.j) // a plan made after the block
	req := h100("two")
	req.WaitForCapacity, req.Timeout = true, time.Hour
	if _, err := e.p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	if offerBlocked() {
		t.Errorf("%s is still blocked after VM two became ready on it", first)
	}
	if _, err := e.p.Launch(ctx, h100("three")); err != nil {
		t.Fatal(err)
	}
	var on []string
	for _, c := range a.Calls(pt.OpCreate) {
		if c.Err == nil {
			on = append(on, c.VM+" "+c.Offer)
		}
	}
	if want := []string{"one " + a.Offers[1].Key(), "two " + first, "three " + first}; !slices.Equal(on, want) {
		t.Errorf("creates %v, want %v", on, want)
	}
}

// TestHostBlock: a failure scoped to a host (a machine that failed GPU
// acceptance) blocks every offer on that machine and nothing else, and one
// on an offer without a host blocks only that offer.
func TestHostBlock(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		hosts     [3]string // hosts of the three offers, cheapest first
		wantOffer string
		wantBlock string
	}{
		{"the host's other offer is skipped", [3]string{"m1", "m1", "m2"}, "a|us-east|us-east-1a|h100.c|od", "host:a|m1"},
		{"no host: only the offer is blocked", [3]string{"", "", ""}, "a|us-east|us-east-1a|h100.b|od", "offer:a|us-east|us-east-1a|h100.a|od"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			a := e.fake("a")
			a.Offers = nil
			for i, typ := range []string{"h100.a", "h100.b", "h100.c"} {
				o := pt.Offer("us-east", "us-east-1a", typ, "H100-80GB", 1, 2.0+float64(i)/10)
				o.Host = tc.hosts[i]
				a.Offers = append(a.Offers, o)
			}
			a.Script(&pt.Rule{Op: pt.OpCreate, Match: func(c *pt.Call) bool { return c.Offer == "a|us-east|us-east-1a|h100.a|od" },
				Err: &provider.Error{Kind: provider.Failed, Op: "create", Provider: "a", Err: errors.New("bad machine"), Block: provider.ScopeHost}})
			req := h100("vm")
			req.Providers = []string{"a"}
			if _, err := e.p.Launch(ctx, req); err != nil {
				t.Fatal(err)
			}
			var tried []string
			for _, c := range a.Calls(pt.OpCreate) {
				tried = append(tried, c.Offer)
			}
			if want := []string{"a|us-east|us-east-1a|h100.a|od", tc.wantOffer}; !slices.Equal(tried, want) {
				t.Errorf("creates %v, want %v", tried, want)
			}
			blocks, err := e.j.Blocks(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if len(blocks) != 1 || blocks[0].Key != tc.wantBlock {
				t.Errorf("blocks %+v, want one %s", blocks, tc.wantBlock)
			}
		})
	}
}
