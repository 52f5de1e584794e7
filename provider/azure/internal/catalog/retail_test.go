package catalog

import (
	"os"
	"strings"
	"testing"
)

// The fixture is a page in the documented shape of the Retail Prices API.
// Its eastus/centralus Linux and Spot rows carry the figures of the
// embedded catalog; the Windows, Low Priority and Reservation rows carry
// made-up prices and exist only to be filtered out.
func TestLinuxPricesPicksConsumptionMeters(t *testing.T) {
	b, err := os.ReadFile("testdata/retail_page.json")
	if err != nil {
		t.Fatal(err)
	}
	page, err := ParseRetailPage(b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.NextPageLink, "$skip=100") {
		t.Fatalf("next page link %q", page.NextPageLink)
	}
	p := LinuxPrices("Standard_NC24ads_A100_v4", page.Items)
	if len(p) != 2 || p["eastus"] != (RegionPrice{Region: "eastus", OnDemand: 3.673, Spot: 0.444433}) ||
		p["centralus"] != (RegionPrice{Region: "centralus", OnDemand: 4.15, Spot: 0.4565}) {
		t.Fatalf("prices %+v", p)
	}
}

func TestRepriceKeepsShapesAndDropsSpotAtOnDemand(t *testing.T) {
	b, _ := os.ReadFile("testdata/retail_page.json")
	page, _ := ParseRetailPage(b)
	old := &Catalog{Source: "old", Retrieved: "2020-01-01", Sizes: []Size{
		{Name: "Standard_NC24ads_A100_v4", GPU: "A100-80GB", GPUCount: 1, GPUMemoryGB: 80, VCPUs: 24, MemoryGB: 220,
			Regions: []RegionPrice{{Region: "westus9", OnDemand: 1}}},
		{Name: "Standard_NC40ads_H100_v5", GPU: "H100-NVL", GPUCount: 1, GPUMemoryGB: 94, VCPUs: 40, MemoryGB: 320},
		{Name: "Standard_ND96isr_H100_v5", GPU: "H100-80GB", GPUCount: 8, GPUMemoryGB: 80, VCPUs: 96, MemoryGB: 1900,
			Regions: []RegionPrice{{Region: "eastus", OnDemand: 98.32}}},
	}}
	prices := map[string]Prices{}
	for _, s := range old.Sizes {
		prices[s.Name] = LinuxPrices(s.Name, page.Items)
	}
	c, warnings := Reprice(old, prices, "Retail Prices API", "2026-12-01")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	a100 := c.Sizes[0].Regions
	if len(a100) != 2 || a100[0].Region != "centralus" || a100[1].Region != "eastus" || c.Retrieved != "2026-12-01" {
		t.Fatalf("A100 regions %+v", a100)
	}
	if h := c.Sizes[1].Regions; len(h) != 1 || h[0].Spot != 0 || h[0].OnDemand != 6.98 {
		t.Fatalf("H100 NVL regions %+v (a Spot price equal to on-demand must be dropped)", h)
	}
	if nd := c.Sizes[2].Regions; len(nd) != 1 || nd[0].OnDemand != 98.32 {
		t.Fatalf("an unpriced size lost its regions: %+v", nd)
	}
	if len(warnings) != 2 || old.Sizes[0].Regions[0].Region != "westus9" {
		t.Fatalf("warnings %q; old catalog changed: %+v", warnings, old.Sizes[0])
	}
}

func TestValidateRefusesBadEntries(t *testing.T) {
	good := Size{Name: "Standard_NC4as_T4_v3", GPU: "T4", GPUCount: 1, GPUMemoryGB: 16, VCPUs: 4, MemoryGB: 28,
		Regions: []RegionPrice{{Region: "eastus", OnDemand: 0.526}}}
	for name, mutate := range map[string]func(*Size){
		"alias GPU":      func(s *Size) { s.GPU = "Tesla T4" },
		"no GPUs":        func(s *Size) { s.GPUCount = 0 },
		"bad size name":  func(s *Size) { s.Name = "NC4as T4 v3" },
		"zero price":     func(s *Size) { s.Regions[0].OnDemand = 0 },
		"display region": func(s *Size) { s.Regions[0].Region = "US East" },
		"twice":          func(s *Size) { s.Regions = append(s.Regions, s.Regions[0]) },
	} {
		s := good
		s.Regions = append([]RegionPrice(nil), good.Regions...)
		mutate(&s)
		c := &Catalog{Source: "s", Retrieved: "d", Sizes: []Size{s}}
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
