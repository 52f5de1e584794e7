package gpuprov_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/org/gpuprov"
	"github.com/org/gpuprov/journal"
	"github.com/org/gpuprov/provider"
	pt "github.com/org/gpuprov/provider/providertest"
)

// needsEnv: "a" has a small and a big H100 machine on fixed 100 GB disks and
// cannot label; "b" has a mid-size one, sizes disks and labels.
func needsEnv(t *testing.T) *env {
	e := newEnv(t)
	a, b := e.fake("a"), e.fake("b")
	for i := range a.Offers {
		a.Offers[i].VCPUs, a.Offers[i].MemoryGB, a.Offers[i].DiskGB = 16, 128, 100
	}
	a.Offers[2].VCPUs, a.Offers[2].MemoryGB = 96, 768
	b.Offers[0].VCPUs, b.Offers[0].MemoryGB, b.Offers[0].DiskGB = 32, 256, 50
	b.Caps.DiskSize, b.Caps.Labels = true, true
	e.p = e.provisioner(e.j)
	return e
}

// TestRequestNeedsFilterOffers: vCPUs, memory and disk needs filter offers
// in the core, whatever the adapter's Plan returned; a provider that sizes
// disks gets the requested size on its offer and at create.
func TestRequestNeedsFilterOffers(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		set  func(r *gpuprov.Request)
		want []string // offer keys, cheapest first
	}{
		{"no needs", func(*gpuprov.Request) {}, []string{"a|us-east|us-east-1a", "a|us-east|us-east-1b", "a|eu-west|eu-west-1a", "b|central|"}},
		{"vcpus", func(r *gpuprov.Request) { r.MinVCPUs = 32 }, []string{"a|eu-west|eu-west-1a", "b|central|"}},
		{"memory", func(r *gpuprov.Request) { r.MinMemoryGB = 512 }, []string{"a|eu-west|eu-west-1a"}},
		{"disk", func(r *gpuprov.Request) { r.DiskGB = 500 }, []string{"b|central|"}},
		{"disk a fixed disk meets", func(r *gpuprov.Request) { r.DiskGB = 100 }, []string{"a|us-east|us-east-1a", "a|us-east|us-east-1b", "a|eu-west|eu-west-1a", "b|central|"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := needsEnv(t)
			req := h100("needy")
			tc.set(&req)
			res, err := e.p.Plan(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, o := range res.Offers {
				got = append(got, o.Provider+"|"+o.Location.Region+"|"+o.Location.Zone)
				if req.DiskGB > 0 && o.DiskGB < req.DiskGB {
					t.Errorf("offer %s has a %d GB disk; the request needs %d", o.Key(), o.DiskGB, req.DiskGB)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("planned %v; want %v", got, tc.want)
			}
		})
	}

	e := needsEnv(t)
	req := h100("big-disk")
	req.DiskGB = 500
	if _, err := e.p.Launch(ctx, req); err != nil {
		t.Fatal(err)
	}
	creates := e.fake("b").Calls(pt.OpCreate)
	if len(creates) != 1 || creates[0].DiskGB != 500 {
		t.Fatalf("creates on b: %+v; want one with a 500 GB disk", creates)
	}

	// A provider that sizes disks up to a limit: above it, its offer is out.
	e2 := needsEnv(t)
	e2.fake("b").Offers[0].MaxDiskGB = 400
	req = h100("too-big-disk")
	req.DiskGB = 500
	_, err := e2.p.Launch(ctx, req)
	if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), "none with a 500 GB disk") {
		t.Fatalf("launch above every disk limit: %v; want no offers, naming the disk filter", err)
	}

	// A need nothing meets says which and what there is.
	req = h100("too-needy")
	req.MinVCPUs = 1000
	_, err = e.p.Launch(ctx, req)
	if !errors.Is(err, gpuprov.ErrNoOffers) || !strings.Contains(err.Error(), "none with 1000 vCPUs or more: the most offered is 96") {
		t.Fatalf("launch: %v; want no offers, naming the vCPU filter and the most offered", err)
	}
}

// TestRequestLabels: labels are checked against the strictest cloud's rules
// before anything is journaled; a valid set reaches every resource of the
// VM beside the identity labels, on providers that can label, and a
// provider that cannot is left out of the plan with the reason.
func TestRequestLabels(t *testing.T) {
	ctx := context.Background()
	e := needsEnv(t)
	many := map[string]string{}
	for i := range provider.MaxUserLabels + 1 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"Team": "ml"}, `key "Team"`},
		{map[string]string{"team": "ML"}, `team="ML"`},
		{map[string]string{"gpuprov-owner": "x"}, "gpuprov's own"},
		{map[string]string{"1team": "x"}, `key "1team"`},
		{map[string]string{"team": "-x"}, `team="-x"`},
		{map[string]string{"team": strings.Repeat("x", 64)}, "at most 63"},
		{map[string]string{"cost:center": "x"}, `key "cost:center"`},
		{map[string]string{"cost_center": "x"}, `key "cost_center"`}, // Lambda's tag keys take no '_'
		{map[string]string{"t": "x"}, `key "t"`},                     // nor one character
		{map[string]string{strings.Repeat("k", 56): "x"}, "2 to 55"},
		{many, "41 labels; at most 40"},
	} {
		req := h100("labelled")
		req.Labels = tc.labels
		_, err := e.p.Launch(ctx, req)
		var re *gpuprov.RequestError
		if !errors.As(err, &re) || re.Field != "labels" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("labels %v: %v; want a labels RequestError saying %q", tc.labels, err, tc.want)
		}
	}
	if _, err := e.j.GetVM(ctx, "labelled"); !errors.Is(err, journal.ErrNotFound) {
		t.Fatalf("a refused request was journaled: %v", err)
	}

	req := h100("labelled")
	req.Labels = map[string]string{"team": "ml", "cost-center": "r-and-d"}
	res, err := e.p.Plan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if perr := res.Errors["a"]; perr == nil || !strings.Contains(perr.Error(), "cannot put the request's labels") {
		t.Errorf("provider a (no labels) was not left out with the reason: %v", res.Errors)
	}
	vm, err := e.p.Launch(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if vm.Provider != "b" {
		t.Fatalf("launched on %s; only b can label", vm.Provider)
	}
	for _, c := range e.fake("b").Calls(pt.OpPrepare, pt.OpCreate) {
		if c.Labels["team"] != "ml" || c.Labels["cost-center"] != "r-and-d" || c.Labels[provider.LabelVM] != "labelled" {
			t.Errorf("%s on b got labels %v; want the caller's and the identity", c.Op, c.Labels)
		}
	}
}
