package aws_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/aws"
)

func plan(t *testing.T, e *env, req provider.ResourceRequest) []provider.Offer {
	t.Helper()
	offers, err := e.p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	return offers
}

// Offline Plan: the catalog's types, prices and zone ids, cheapest first,
// no API call but the reservations' (none here).
func TestPlanOffline(t *testing.T) {
	e := newEnv(t, awsConfig())
	for _, tc := range []struct {
		req   provider.ResourceRequest
		typ   string
		price float64
		zones int // offers in us-east-1
	}{
		{provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8}, "p5.48xlarge", 98.32, 6},
		{provider.ResourceRequest{GPU: "A100-40GB", GPUCount: 8}, "p4d.24xlarge", 32.7726, 3},
		{provider.ResourceRequest{GPU: "A100-80GB", GPUCount: 8}, "p4de.24xlarge", 40.96575, 6},
		{provider.ResourceRequest{GPU: "L40S", GPUCount: 1}, "g6e.xlarge", 1.861, 4},
		{provider.ResourceRequest{GPU: "L4", GPUCount: 1}, "g6.xlarge", 0.8048, 4},
		{provider.ResourceRequest{GPU: "A10G", GPUCount: 4}, "g5.12xlarge", 5.672, 5},
		{provider.ResourceRequest{GPU: "T4", GPUCount: 1}, "g4dn.xlarge", 0.526, 5},
		{provider.ResourceRequest{GPU: "V100", GPUCount: 1}, "p3.2xlarge", 3.06, 6},
	} {
		offers := plan(t, e, tc.req)
		if len(offers) == 0 || offers[0].InstanceType != tc.typ || offers[0].PricePerHour != tc.price {
			t.Fatalf("%+v: first offer %+v, want %s at %v", tc.req, offers, tc.typ, tc.price)
		}
		east := 0
		for i, o := range offers {
			if i > 0 && o.PricePerHour < offers[i-1].PricePerHour {
				t.Fatalf("offers not sorted by price: %+v", offers)
			}
			if o.Location.Region == "us-east-1" {
				east++
			}
			if o.Spot || o.Provider != "aws" || o.Location.Zone == "" {
				t.Fatalf("offer %+v", o)
			}
		}
		if east != tc.zones {
			t.Fatalf("%s: %d offers in us-east-1, want %d", tc.typ, east, tc.zones)
		}
	}
	if offers := plan(t, e, provider.ResourceRequest{GPU: "B200", GPUCount: 8}); len(offers) != 0 {
		t.Fatalf("offers for a GPU the catalog lacks: %+v", offers)
	}
	if offers := plan(t, e, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Regions: []string{"us-west-2"}}); len(offers) != 4 ||
		offers[0].Location.Region != "us-west-2" {
		t.Fatalf("region filter: %+v", offers)
	}
	if offers := plan(t, e, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOnly}); len(offers) != 0 {
		t.Fatalf("spot offers without spot configured: %+v", offers)
	}
	// Without refine, the only calls are the account's capacity
	// reservations: one DescribeCapacityReservations per configured region
	// for each plan whose GPU the catalog has (B200 too: p6-b200 is sold
	// only reserved).
	for _, r := range e.f.requests("") {
		if r.Action != "DescribeCapacityReservations" {
			t.Fatalf("offline plan called %s", r.Action)
		}
	}
	before := len(e.f.requests(""))
	if offers := plan(t, e, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Reserved: provider.ForbidReserved}); len(offers) != 8 {
		t.Fatalf("a plan forbidding reservations: %+v", offers)
	}
	if n := len(e.f.requests("")) - before; n != 0 {
		t.Fatalf("a plan forbidding reservations made %d API calls", n)
	}
}

func detail(t *testing.T, o provider.Offer) map[string]any {
	t.Helper()
	var d map[string]any
	if err := json.Unmarshal(o.Detail, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Offline spot offers are priced at the on-demand cap.
func TestPlanSpotOffline(t *testing.T) {
	cfg := awsConfig()
	cfg.Spot = true
	e := newEnv(t, cfg)
	offers := plan(t, e, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOrOnDemand})
	spot := 0
	for _, o := range offers {
		if o.Spot {
			spot++
			if o.PricePerHour != 0.8048 || detail(t, o)["price_source"] != "on-demand-cap" {
				t.Fatalf("offline spot offer %+v %s", o, o.Detail)
			}
		}
	}
	if spot != 8 || len(offers) != 16 {
		t.Fatalf("%d offers, %d spot; want 16 and 8", len(offers), spot)
	}
}

// Refine asks EC2 for the zones that sell the type and the spot price.
func TestPlanRefined(t *testing.T) {
	cfg := awsConfig()
	cfg.Spot, cfg.Refine = true, true
	e := newEnv(t, cfg)
	e.f.spot["g6.xlarge|use1-az2"] = "0.3879"
	offers := plan(t, e, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOrOnDemand})
	if len(offers) != 8 { // az1 and az2 of two regions, on demand and spot
		t.Fatalf("%d refined offers, want 8: %+v", len(offers), offers)
	}
	first := offers[0]
	if !first.Spot || first.PricePerHour != 0.3879 || first.Location.Zone != "use1-az2" || detail(t, first)["price_source"] != "spot-price-history" {
		t.Fatalf("cheapest refined offer %+v %s", first, first.Detail)
	}
	sp := e.f.requests("DescribeSpotPriceHistory")
	if len(sp) != 2 || sp[0].Form.Get("ProductDescription.1") != "Linux/UNIX" || sp[0].Form.Get("InstanceType.1") != "g6.xlarge" ||
		sp[0].Form.Get("StartTime") == "" {
		t.Fatalf("spot price requests %+v", sp)
	}
}

// A refinement that fails (500, AuthFailure) falls back to the catalog.
func TestPlanRefinementFallsBack(t *testing.T) {
	for _, tc := range []struct {
		code   string
		status int
	}{{"InternalError", http.StatusInternalServerError}, {"AuthFailure", http.StatusUnauthorized}} {
		t.Run(tc.code, func(t *testing.T) {
			cfg := awsConfig()
			cfg.Spot, cfg.Refine = true, true
			e := newEnv(t, cfg)
			for _, a := range []string{"DescribeInstanceTypeOfferings", "DescribeSpotPriceHistory"} {
				e.f.fail(&fakeRule{Action: a, Code: tc.code, Status: tc.status})
			}
			offers := plan(t, e, provider.ResourceRequest{GPU: "L4", GPUCount: 1, Spot: provider.SpotOrOnDemand})
			if len(offers) != 16 || offers[0].PricePerHour != 0.8048 {
				t.Fatalf("fallback offers: %d, first %+v", len(offers), offers[0])
			}
			if n := len(e.f.requests("DescribeInstanceTypeOfferings")); n != 2 {
				t.Fatalf("%d offering calls, want one per region", n)
			}
		})
	}
}

// Every offer names the vCPU quota bucket EC2 counts its type in
// (Offer.Family), which a VcpuLimitExceeded blocks: the EC2 User Guide's
// "On-Demand Instance quotas" has one quota per bucket and region, Running
// On-Demand G and VT instances for g4dn, g5, g6 and g6e, Running On-Demand
// P instances for p3, p4d, p4de and p5.
func TestPlanNamesTheQuotaBucket(t *testing.T) {
	e := newEnv(t, aws.Config{Regions: []string{"us-east-1"}, Spot: true})
	for _, tc := range []struct {
		gpu    string
		count  int
		family string
	}{
		{"L4", 1, "G"}, {"T4", 1, "G"}, {"A10G", 1, "G"}, {"L40S", 8, "G"},
		{"H100-80GB", 8, "P"}, {"A100-40GB", 8, "P"}, {"A100-80GB", 8, "P"}, {"V100", 1, "P"},
	} {
		offers := plan(t, e, provider.ResourceRequest{GPU: tc.gpu, GPUCount: tc.count, Spot: provider.SpotOrOnDemand})
		if len(offers) == 0 {
			t.Fatalf("%s×%d: no offer", tc.gpu, tc.count)
		}
		for _, o := range offers {
			if o.Family != tc.family {
				t.Fatalf("%s (%s) has family %q, want %q", o.InstanceType, o.Key(), o.Family, tc.family)
			}
		}
	}
}
