package gpuprov_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/clock"
	"github.com/org/gpuprov/gpu"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// alternativeFakes are two clouds with H100s and A100s: "a" has the
// cheapest H100s ($2.00, $2.10), an A100-80GB×2 cheaper than any H100
// ($1.50) and an A100-80GB×1 ($0.90) that a request for two never gets;
// "b" an H100 at $2.50 and an A100-80GB×2 at $3.00.
func alternativeFakes(c clock.Clock) []*pt.Fake {
	a := pt.NewFake("a", c,
		pt.Offer("us-east", "us-east-1a", "h100.1", "H100-80GB", 1, 2.00),
		pt.Offer("us-east", "us-east-1b", "h100.1", "H100-80GB", 1, 2.10),
		pt.Offer("us-east", "us-east-1a", "a100.2", "A100-80GB", 2, 1.50),
		pt.Offer("us-east", "us-east-1a", "a100.1", "A100-80GB", 1, 0.90),
	)
	b := pt.NewFake("b", c,
		pt.Offer("central", "", "gpu-h100", "H100-80GB", 1, 2.50),
		pt.Offer("central", "", "gpu-a100x2", "A100-80GB", 2, 3.00),
	)
	return []*pt.Fake{a, b}
}

func newAlternativesEnv(t *testing.T, opts ...gpuprov.Option) *env {
	t.Helper()
	clk := clock.NewFake(t0)
	t.Cleanup(clk.AutoAdvance())
	return newEnvWith(t, clk, alternativeFakes(clk), opts...)
}

// h100OrA100x2 asks for one H100, or else two A100-80GB (aliases as a
// user types them).
func h100OrA100x2(name string) gpuprov.Request {
	return gpuprov.Request{Name: name, GPUs: []gpuprov.GPUChoice{{GPU: "h100"}, {GPU: "a100-80gb", Count: 2}}, Timeout: time.Hour}
}

// offerList is offers as "provider GPU×count $price", in order.
func offerList(offers []provider.Offer) []string {
	out := make([]string, len(offers))
	for i, o := range offers {
		out[i] = fmt.Sprintf("%s %s×%d $%.2f", o.Provider, o.GPU, o.GPUCount, o.PricePerHour)
	}
	return out
}

func TestGPUAlternativesInvalidCreateNothing(t *testing.T) {
	e := newAlternativesEnv(t)
	alts := func(gs ...gpuprov.GPUChoice) gpuprov.Request { return gpuprov.Request{Name: "x", GPUs: gs} }
	cases := []struct {
		name string
		req  gpuprov.Request
		want string
	}{
		{"unknown GPU among the alternatives", alts(gpuprov.GPUChoice{GPU: "h100"}, gpuprov.GPUChoice{GPU: "X100"}),
			`gpus[1]: unknown GPU "X100": did you mean A100-40GB, H100-80GB or P100?`},
		{"empty alternative", alts(gpuprov.GPUChoice{GPU: "h100"}, gpuprov.GPUChoice{Count: 2}), "gpus[1]: empty GPU (known: A10,"},
		{"the same GPU twice under two names", alts(gpuprov.GPUChoice{GPU: "h100"}, gpuprov.GPUChoice{GPU: "L4"}, gpuprov.GPUChoice{GPU: "H100-80GB", Count: 1}),
			"gpus[2]: H100-80GB×1 is gpus[0] already"},
		{"a count out of range", alts(gpuprov.GPUChoice{GPU: "h100", Count: 65}), "gpus[0].count: 65 is not between 1 and 64"},
		{"GPU and GPUs both", gpuprov.Request{Name: "x", GPU: "L4", GPUs: []gpuprov.GPUChoice{{GPU: "h100"}}},
			`gpus: set with gpu "L4": name one GPU in gpu, or every alternative in gpus`},
		{"unknown order", gpuprov.Request{Name: "x", GPUs: []gpuprov.GPUChoice{{GPU: "h100"}, {GPU: "L4"}}, GPUOrder: "random"},
			`gpu_order: "random": want "price" (the default) or "given"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for what, err := range map[string]error{
				"Launch":   func() error { _, err := e.p.Launch(context.Background(), c.req); return err }(),
				"Plan":     func() error { _, err := e.p.Plan(context.Background(), c.req); return err }(),
				"Validate": c.req.Validate([]string{"a", "b"}),
			} {
				if !errors.Is(err, gpuprov.ErrInvalidRequest) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: err %v, want ErrInvalidRequest saying %q", what, err, c.want)
				}
			}
		})
	}
	if vms, _ := e.j.ListVMs(context.Background(), journal.ListOptions{}); len(vms) != 0 {
		t.Fatalf("invalid requests journaled %d VMs", len(vms))
	}
	for _, f := range e.fakes {
		if calls := f.Calls(); len(calls) != 0 {
			t.Fatalf("invalid requests reached %s: %+v", f.Name(), calls)
		}
	}
}

// TestGPUAlternativesPlanOrder: the offers of every alternative are merged
// into one plan, by price across all of them by default, or alternative by
// alternative in the order given.
func TestGPUAlternativesPlanOrder(t *testing.T) {
	byPrice := []string{"a A100-80GB×2 $1.50", "a H100-80GB×1 $2.00", "a H100-80GB×1 $2.10", "b H100-80GB×1 $2.50", "b A100-80GB×2 $3.00"}
	for _, tc := range []struct {
		name string
		edit func(*gpuprov.Request)
		want []string
	}{
		{"by price across all", func(*gpuprov.Request) {}, byPrice},
		{"price is the default", func(r *gpuprov.Request) { r.GPUOrder = "price" }, byPrice},
		{"given: H100 first", func(r *gpuprov.Request) { r.GPUOrder = gpuprov.GPUOrderGiven },
			[]string{"a H100-80GB×1 $2.00", "a H100-80GB×1 $2.10", "b H100-80GB×1 $2.50", "a A100-80GB×2 $1.50", "b A100-80GB×2 $3.00"}},
		{"given: A100 first", func(r *gpuprov.Request) { r.GPUOrder = gpuprov.GPUOrderGiven; slices.Reverse(r.GPUs) },
			[]string{"a A100-80GB×2 $1.50", "b A100-80GB×2 $3.00", "a H100-80GB×1 $2.00", "a H100-80GB×1 $2.10", "b H100-80GB×1 $2.50"}},
		{"filters apply to every alternative", func(r *gpuprov.Request) { r.MaxPricePerHour = 2.2; r.GPUOrder = gpuprov.GPUOrderGiven },
			[]string{"a H100-80GB×1 $2.00", "a H100-80GB×1 $2.10", "a A100-80GB×2 $1.50"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newAlternativesEnv(t)
			req := h100OrA100x2("")
			tc.edit(&req)
			res, err := e.p.Plan(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if got := offerList(res.Offers); !slices.Equal(got, tc.want) {
				t.Errorf("offers\n\t%q\nwant\n\t%q", got, tc.want)
			}
			if res.Explanation != "" {
				t.Errorf("explanation %q with offers of every alternative", res.Explanation)
			}
		})
	}
}

// planRecorder is a fake that records the GPU×count of each Plan call.
type planRecorder struct {
	*pt.Fake
	mu    sync.Mutex
	asked []string
}

func (r *planRecorder) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	r.mu.Lock()
	r.asked = append(r.asked, fmt.Sprintf("%s×%d", req.GPU, req.GPUCount))
	r.mu.Unlock()
	return r.Fake.Plan(ctx, req)
}

func (r *planRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.asked
	r.asked = nil
	slices.Sort(out)
	return out
}

// TestGPUAlternativesReachThePlans: each provider's Plan is asked for each
// alternative with its own count (the request's count where it gives
// none), and the plan cache keeps each alternative's offers apart: a
// request for one of them is answered from the cache with that model only.
func TestGPUAlternativesReachThePlans(t *testing.T) {
	clk := clock.NewFake(t0)
	t.Cleanup(clk.AutoAdvance())
	e := newEnvWith(t, clk, alternativeFakes(clk))
	var recs []*planRecorder
	opts := []gpuprov.Option{gpuprov.WithClock(clk)}
	for _, f := range e.fakes {
		r := &planRecorder{Fake: f}
		recs = append(recs, r)
		opts = append(opts, gpuprov.WithProvider(r))
	}
	p, err := gpuprov.New(e.j, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx := context.Background()

	req := gpuprov.Request{GPUCount: 2, GPUs: []gpuprov.GPUChoice{{GPU: "H100", Count: 1}, {GPU: "A100-80GB"}, {GPU: "L4", Count: 8}}}
	res, err := p.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		// (L4×8 is asked again, alone, to say why it has no offer.)
		if got, want := slices.Compact(r.take()), []string{"A100-80GB×2", "H100-80GB×1", "L4×8"}; !slices.Equal(got, want) {
			t.Errorf("%s's Plan was asked for %q, want %q", r.Name(), got, want)
		}
	}
	for _, o := range res.Offers {
		if o.GPU == "A100-80GB" && o.GPUCount != 2 {
			t.Errorf("planned %s %s×%d for a request of 2", o.Key(), o.GPU, o.GPUCount)
		}
	}
	// The alternative no provider has is named with why, beside the
	// others' offers.
	if want := "L4×8: no configured provider offers L4×8 in any region"; res.Explanation != want {
		t.Errorf("explanation %q, want %q", res.Explanation, want)
	}

	// One of the alternatives alone: from the cache, that model only.
	single, err := p.Plan(ctx, gpuprov.Request{GPU: "A100-80GB", GPUCount: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := offerList(single.Offers), []string{"a A100-80GB×2 $1.50", "b A100-80GB×2 $3.00"}; !slices.Equal(got, want) {
		t.Errorf("A100-80GB×2 alone: %q, want %q", got, want)
	}
	for _, r := range recs {
		if got := r.take(); len(got) != 0 {
			t.Errorf("%s planned %q again for an alternative planned a moment ago", r.Name(), got)
		}
	}
	// Another count of the same model is another request.
	if one, err := p.Plan(ctx, gpuprov.Request{GPU: "A100-80GB"}); err != nil || !slices.Equal(offerList(one.Offers), []string{"a A100-80GB×1 $0.90"}) {
		t.Errorf("A100-80GB×1: %v, %v", offerList(one.Offers), err)
	}
}

// TestGPUAlternativesNoOffersNamesEach: when no alternative has an offer
// left, the error names every alternative and why it had none.
func TestGPUAlternativesNoOffersNamesEach(t *testing.T) {
	t.Run("filters", func(t *testing.T) {
		e := newAlternativesEnv(t)
		req := gpuprov.Request{Name: "why", GPUs: []gpuprov.GPUChoice{{GPU: "h100"}, {GPU: "l4", Count: 2}}, MaxPricePerHour: 1, Timeout: time.Hour}
		_, err := e.p.Launch(context.Background(), req)
		if !errors.Is(err, gpuprov.ErrNoOffers) {
			t.Fatalf("err %v, want ErrNoOffers", err)
		}
		want := "no offers for H100-80GB×1 or L4×2: 0 planned, 0 blocked, 0 tried; " +
			"H100-80GB×1: no offer passes the request's filters: 3 offers of H100-80GB×1 on the configured providers, 3 on-demand, " +
			"none under $1.00/h: the cheapest is $2.00/h (a us-east/us-east-1a h100.1); " +
			"L4×2: no configured provider offers L4×2 in any region"
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error\n\t%v\nwant it to say\n\t%s", err, want)
		}
		e.assertClean("why")
	})
	t.Run("one blocked, one absent", func(t *testing.T) {
		e := newAlternativesEnv(t)
		for _, f := range e.fakes {
			f.Script(&pt.Rule{Op: pt.OpCreate, Err: pe(provider.Capacity, "sold out")})
		}
		if _, err := e.p.Launch(context.Background(), h100("first")); err == nil {
			t.Fatal("launched on sold-out clouds")
		}
		req := gpuprov.Request{Name: "second", GPUs: []gpuprov.GPUChoice{{GPU: "h100"}, {GPU: "l4"}}, Timeout: time.Hour}
		_, err := e.p.Launch(context.Background(), req)
		if !errors.Is(err, gpuprov.ErrNoOffers) {
			t.Fatalf("err %v, want ErrNoOffers", err)
		}
		for _, w := range []string{"no offers for H100-80GB×1 or L4×1: 3 planned, 3 blocked, 0 tried",
			"L4×1: no configured provider offers L4×1 in any region", "blocked: a us-east/us-east-1a h100.1 until "} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q:\n%v", w, err)
			}
		}
		e.assertClean("second")
	})
}

// a100x2Probe is what gpu.Script prints on a machine with two healthy
// A100-80GB.
const a100x2Probe = `@@gpuprov query
0, GPU-a100a000-0000-4000-8000-000000000000, 1654922059001, NVIDIA A100-SXM4-80GB, 00000000:07:00.0, 81920, 580.159.04, Enabled, 0, [N/A], No, No, 4, 4, 16, 16, 0x0000000000000001, 34
1, GPU-a100a000-0000-4000-8000-000000000001, 1654922059002, NVIDIA A100-SXM4-80GB, 00000000:0F:00.0, 81920, 580.159.04, Enabled, 0, [N/A], No, No, 4, 4, 16, 16, 0x0000000000000001, 35
@@gpuprov rc 0
@@gpuprov xid
@@gpuprov rc 0
`

// TestGPUAlternativesStockoutTakesTheNextModel: a request for an H100 or
// else two A100-80GB, with every H100 stocked out, gets the A100s in one
// Launch: the H100 offers are tried first (GPUOrderGiven), each stockout
// moves on, and the A100 machine passes acceptance as two A100-80GB.
func TestGPUAlternativesStockoutTakesTheNextModel(t *testing.T) {
	nodes := &probeNodes{outs: []string{a100x2Probe}}
	e := newAlternativesEnv(t, gpuprov.WithConnector(nodes), gpuprov.WithAcceptance(gpu.Options{}))
	h100s := func(c *pt.Call) bool { return strings.Contains(c.Offer, "h100") }
	for _, f := range e.fakes {
		f.Script(&pt.Rule{Op: pt.OpCreate, Match: h100s, Err: pe(provider.Capacity, "no H100 capacity")})
	}
	req := h100OrA100x2("train")
	req.GPUOrder = gpuprov.GPUOrderGiven
	vm, err := e.p.Launch(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != gpuprov.StateReady || vm.GPU != "A100-80GB" || vm.GPUCount != 2 || vm.Provider != "a" || vm.PricePerHour != 1.50 {
		t.Fatalf("got %s on %s %s×%d at $%.2f, want ready on a A100-80GB×2 at $1.50", vm.State, vm.Provider, vm.GPU, vm.GPUCount, vm.PricePerHour)
	}
	as, err := e.j.Attempts(context.Background(), "train")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range as {
		got = append(got, a.OfferKey+" "+a.ErrorKind)
	}
	want := []string{"a|us-east|us-east-1a|h100.1|od capacity", "a|us-east|us-east-1b|h100.1|od capacity",
		"b|central||gpu-h100|od capacity", "a|us-east|us-east-1a|a100.2|od "}
	if !slices.Equal(got, want) {
		t.Errorf("attempts\n\t%q\nwant\n\t%q", got, want)
	}
	if acc := events(t, e.j, "train", gpuprov.EvAccepted); len(acc) != 1 || !strings.Contains(acc[0], "A100-80GB") {
		t.Errorf("accepted events %q, want the A100s accepted", acc)
	}
	if got := events(t, e.j, "train", gpuprov.EvLaunch); len(got) != 1 || got[0] != "H100-80GB×1 or A100-80GB×2" {
		t.Errorf("launch event %q", got)
	}
	row := e.assertClean("train")
	if n := len(e.live()); n != 1 {
		t.Errorf("%d live instances, want the A100 machine only", n)
	}
	// The journaled request keeps the alternatives, canonical.
	if got := vmRequest(t, e, row.Name); !slices.Equal(got.GPUs, []gpuprov.GPUChoice{{GPU: "H100-80GB", Count: 1}, {GPU: "A100-80GB", Count: 2}}) || got.GPUOrder != gpuprov.GPUOrderGiven {
		t.Errorf("journaled GPUs %+v, order %q", got.GPUs, got.GPUOrder)
	}
}

func vmRequest(t *testing.T, e *env, name string) gpuprov.Request {
	t.Helper()
	vm, err := e.p.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return vm.Request
}

// TestGPUAlternativesByPriceTakeTheCheapestModel: by price, the cheapest
// offer of any alternative is tried first.
func TestGPUAlternativesByPriceTakeTheCheapestModel(t *testing.T) {
	e := newAlternativesEnv(t)
	vm, err := e.p.Launch(context.Background(), h100OrA100x2("cheap"))
	if err != nil {
		t.Fatal(err)
	}
	if vm.GPU != "A100-80GB" || vm.GPUCount != 2 || vm.PricePerHour != 1.50 {
		t.Fatalf("got %s×%d at $%.2f, want the A100-80GB×2 at $1.50", vm.GPU, vm.GPUCount, vm.PricePerHour)
	}
	e.assertClean("cheap")
}

// TestGPUAlternativesOldJournalRequest: a request journaled before GPUs
// existed (GPU and GPUCount only) reads as its one alternative.
func TestGPUAlternativesOldJournalRequest(t *testing.T) {
	var r gpuprov.Request
	if err := json.Unmarshal([]byte(`{"name":"old","gpu":"H100-80GB","gpu_count":8}`), &r); err != nil {
		t.Fatal(err)
	}
	if got := r.Alternatives(); !slices.Equal(got, []gpuprov.GPUChoice{{GPU: "H100-80GB", Count: 8}}) {
		t.Errorf("alternatives %+v", got)
	}
}

// TestGPUAlternativesNotForClusters: a cluster's nodes name one GPU.
func TestGPUAlternativesNotForClusters(t *testing.T) {
	e := newAlternativesEnv(t)
	_, err := e.p.LaunchCluster(context.Background(), gpuprov.ClusterRequest{Name: "c", Nodes: 2, Node: h100OrA100x2("")})
	if !errors.Is(err, gpuprov.ErrInvalidRequest) || !strings.Contains(err.Error(), "node.gpus") {
		t.Fatalf("err %v, want ErrInvalidRequest naming node.gpus", err)
	}
	for _, f := range e.fakes {
		if calls := f.Calls(); len(calls) != 0 {
			t.Fatalf("a refused cluster reached %s: %+v", f.Name(), calls)
		}
	}
}
