package catalog

import (
	"math"
	"os"
	"strings"
	"testing"
)

func loadPages(t *testing.T) []SKU {
	t.Helper()
	var all []SKU
	for _, f := range []string{"testdata/skus_page1.json", "testdata/skus_page2.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParseSKUPage(b)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.SKUs...)
		if f == "testdata/skus_page1.json" && p.NextPageToken != "page-2" {
			t.Fatalf("next page token %q", p.NextPageToken)
		}
	}
	return all
}

// TestRepriceFromRecordedSKUs prices a2-highgpu-1g from a recorded
// services.skus.list response: the latest pricing info wins, DWS and
// commitment SKUs are ignored, Spot comes from the Preemptible SKUs, and a
// region without SKUs is dropped with a warning.
func TestRepriceFromRecordedSKUs(t *testing.T) {
	pb, err := NewPriceBook(loadPages(t))
	if err != nil {
		t.Fatal(err)
	}
	in := &Catalog{Source: "old", Retrieved: "2000-01-01", MachineTypes: []MachineType{{
		Name: "a2-highgpu-1g", GPU: "A100-40GB", AcceleratorType: "nvidia-tesla-a100", GPUCount: 1, GPUMemoryGB: 40,
		VCPUs: 12, MemoryGB: 85, SKU: SKURule{Core: "A2 Instance Core", RAM: "A2 Instance Ram", GPU: "Nvidia Tesla A100 GPU"},
		Regions: []RegionPrice{
			{Region: "us-central1", Zones: []string{"us-central1-a"}, OnDemand: 1},
			{Region: "us-east1", Zones: []string{"us-east1-b"}, OnDemand: 1},
			{Region: "europe-west4", Zones: []string{"europe-west4-a"}, OnDemand: 1},
		},
	}}}
	out, warnings := Reprice(in, pb, "billing", "2026-11-29")
	if out.Retrieved != "2026-11-29" || out.Source != "billing" {
		t.Fatalf("header %q %q", out.Source, out.Retrieved)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "europe-west4") {
		t.Fatalf("warnings %v", warnings)
	}
	rs := out.MachineTypes[0].Regions
	if len(rs) != 2 {
		t.Fatalf("regions %+v", rs)
	}
	// 12 × 0.031611 + 85 × 0.004237 + 2.933908 = 3.673385 (Google's published a2-highgpu-1g price).
	if got := rs[0].OnDemand; math.Abs(got-3.673385) > 1e-5 {
		t.Fatalf("us-central1 on-demand %v, want 3.67339", got)
	}
	// 12 × 0.01264 + 85 × 0.001695 + 1.1472 = 1.442955.
	if got := rs[0].Spot; math.Abs(got-1.442955) > 1e-5 {
		t.Fatalf("us-central1 spot %v, want 1.44291", got)
	}
	if rs[1].Region != "us-east1" || rs[1].Spot != 0 || math.Abs(rs[1].OnDemand-3.673385) > 1e-5 {
		t.Fatalf("us-east1 %+v: want the on-demand price and no spot", rs[1])
	}
	if err := out.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestPriceBookRejectsForeignCurrency(t *testing.T) {
	skus := loadPages(t)
	skus[0].PricingInfo[0].PricingExpression.TieredRates[0].UnitPrice.CurrencyCode = "EUR"
	if _, err := NewPriceBook(skus); err == nil {
		t.Fatal("a EUR price was accepted")
	}
}

func TestMoneyValue(t *testing.T) {
	for _, c := range []struct {
		m    Money
		want float64
	}{{Money{Units: "2", Nanos: 933908000}, 2.933908}, {Money{Nanos: 350000000}, 0.35}, {Money{Units: "88"}, 88}} {
		if got, err := c.m.Value(); err != nil || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%+v = %v, %v; want %v", c.m, got, err, c.want)
		}
	}
	if _, err := (Money{Units: "x"}).Value(); err == nil {
		t.Error("bad units accepted")
	}
}

func TestEmbeddedCatalogShapeIsValid(t *testing.T) {
	b, err := os.ReadFile("../../catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.MachineTypes) == 0 {
		t.Fatal("empty catalog")
	}
	bad := *c
	bad.MachineTypes = append([]MachineType(nil), c.MachineTypes...)
	bad.MachineTypes[0].Regions = []RegionPrice{{Region: "us-central1", Zones: []string{"us-east1-b"}, OnDemand: 1}}
	if err := bad.Validate(); err == nil {
		t.Fatal("a zone outside its region was accepted")
	}
}
