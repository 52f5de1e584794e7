package gpuprov_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// TestNoOffersSaysWhy: a launch that finds no offer says which filter of the
// request emptied the plan and what was there, not only "0 planned". The
// standard fakes offer H100-80GB×1 at $2.00, $2.10 and $2.20 (a: us-east,
// eu-west) and $2.50 (b: central).
func TestNoOffersSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*gpuprov.Request)
		want []string
	}{
		{"price cap below every offer", func(r *gpuprov.Request) { r.MaxPricePerHour = 0.0001 }, []string{
			"4 offers of H100-80GB×1 on the configured providers",
			"none under $0.0001/h: the cheapest is $2.00/h (a us-east/us-east-1a h100.1)",
		}},
		{"region", func(r *gpuprov.Request) { r.Regions = []string{"ap-south"} }, []string{
			"none in regions ap-south: they are in central, eu-west, us-east",
		}},
		{"provider then price", func(r *gpuprov.Request) { r.Providers = []string{"b"}; r.MaxPricePerHour = 2.25 }, []string{
			"1 on providers b", "none under $2.25/h: the cheapest is $2.50/h (b central gpu-h100)",
		}},
		{"region then price", func(r *gpuprov.Request) { r.Regions = []string{"eu-west"}; r.MaxPricePerHour = 2.1 }, []string{
			"1 in regions eu-west", "none under $2.10/h: the cheapest is $2.20/h",
		}},
		{"spot", func(r *gpuprov.Request) { r.Spot = provider.SpotOnly }, []string{
			"none spot: only on-demand capacity is offered",
		}},
		{"GPU memory", func(r *gpuprov.Request) { r.MinGPUMemoryGB = 141 }, []string{
			"none with 141 GB or more per GPU: the most offered is 80 GB",
		}},
		{"GPU nobody offers", func(r *gpuprov.Request) { r.GPU = "L4" }, []string{
			"no configured provider offers L4×1 in any region",
		}},
		{"count nobody offers", func(r *gpuprov.Request) { r.GPUCount = 8 }, []string{
			"no configured provider offers H100-80GB×8 in any region",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			req := h100("why")
			tc.edit(&req)
			_, err := e.p.Launch(context.Background(), req)
			if !errors.Is(err, gpuprov.ErrNoOffers) {
				t.Fatalf("err %v, want ErrNoOffers", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			e.assertClean("why")

			// Plan tells an embedder the same, without launching.
			req.Name = ""
			res, err := e.p.Plan(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Offers) != 0 || !strings.Contains(res.Explanation, tc.want[len(tc.want)-1]) {
				t.Errorf("Plan: %d offers, explanation %q; want none and %q", len(res.Offers), res.Explanation, tc.want[len(tc.want)-1])
			}
		})
	}
}

// TestNoOffersNamesTheBlocks: when every offer is blocked, the error says
// which offers are blocked, until when, and why.
func TestNoOffersNamesTheBlocks(t *testing.T) {
	e := newEnv(t)
	for _, f := range e.fakes {
		f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "sold out")})
	}
	if _, err := e.p.Launch(context.Background(), h100("first")); err == nil {
		t.Fatal("first launch succeeded on sold-out clouds")
	}
	_, err := e.p.Launch(context.Background(), h100("second"))
	if !errors.Is(err, gpuprov.ErrNoOffers) {
		t.Fatalf("second launch: %v, want ErrNoOffers", err)
	}
	for _, w := range []string{"4 planned, 4 blocked", "blocked: a us-east/us-east-1a h100.1 until ", "(capacity, ", " left)", "1 more"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), "no offer passes") {
		t.Errorf("an all-blocked plan is not a filter problem:\n%v", err)
	}
}
