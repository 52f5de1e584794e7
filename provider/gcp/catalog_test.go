package gcp

import (
	"context"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

// smallestPerCount is, per GPU family (machine series + accelerator), the
// smallest machine type of each GPU count the vendor offers on demand, as
// listed on https://cloud.google.com/compute/docs/gpus (read 2026-12-01):
// G2 carries 1 L4 on g2-standard-4/-8/-12/-16/-32, 2 on -24, 4 on -48, 8
// on -96; A2 Standard 1/2/4/8/16 A100 40GB on a2-highgpu-1g..8g and
// a2-megagpu-16g; A3 High and A3 Mega 8 H100 80GB (A3 High 1g/2g/4g only as
// Spot or Flex-start). N1 hosts start at n1-standard-4 by the catalog's
// documented floor (see the catalog's note).
var smallestPerCount = map[string]map[int]string{
	"g2/nvidia-l4":             {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"},
	"a2/nvidia-tesla-a100":     {1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g", 16: "a2-megagpu-16g"},
	"a3/nvidia-h100-80gb":      {8: "a3-highgpu-8g"},
	"a3/nvidia-h100-mega-80gb": {8: "a3-megagpu-8g"},
	"n1/nvidia-tesla-t4":       {1: "n1-standard-4", 2: "n1-standard-16", 4: "n1-standard-32"},
	"n1/nvidia-tesla-v100":     {1: "n1-standard-4", 2: "n1-standard-16", 4: "n1-standard-32", 8: "n1-standard-64"},
}

func family(m *catalog.MachineType) string {
	return strings.SplitN(m.Name, "-", 2)[0] + "/" + m.AcceleratorType
}

// For every GPU family in the catalog, the smallest shape of each GPU count
// is listed wherever the family has that count, and the family's smallest
// shape is listed in every region where the family is: a region's cheapest
// offer for a GPU is never missing from the plan.
func TestCatalogListsTheSmallestShapes(t *testing.T) {
	c, err := embeddedCatalog()
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		family, region string
		count          int
	}
	present := map[key]map[string]bool{} // → machine types priced there
	familyRegions := map[string]map[string]bool{}
	for i := range c.MachineTypes {
		m := &c.MachineTypes[i]
		f := family(m)
		if smallestPerCount[f] == nil {
			t.Errorf("%s: family %s has no row in smallestPerCount: check it against the vendor's shapes", m.InstanceType(), f)
			continue
		}
		for _, r := range m.Regions {
			k := key{f, r.Region, m.GPUCount}
			if present[k] == nil {
				present[k] = map[string]bool{}
			}
			present[k][m.Name] = true
			if familyRegions[f] == nil {
				familyRegions[f] = map[string]bool{}
			}
			familyRegions[f][r.Region] = true
		}
	}
	for k, names := range present {
		want, ok := smallestPerCount[k.family][k.count]
		if !ok {
			t.Errorf("%s has %d GPUs in %s: not a count the vendor offers", k.family, k.count, k.region)
		} else if !names[want] {
			t.Errorf("%s ×%d in %s: the smallest shape %s is missing (have %v)", k.family, k.count, k.region, want, names)
		}
	}
	for f, regions := range familyRegions {
		minCount := 0
		for n := range smallestPerCount[f] {
			if minCount == 0 || n < minCount {
				minCount = n
			}
		}
		for r := range regions {
			if present[key{f, r, minCount}] == nil {
				t.Errorf("%s is in %s without its smallest shape %s", f, r, smallestPerCount[f][minCount])
			}
		}
	}
}

// g2-standard-4 (4 vCPUs, 16 GB, one L4) is the cheapest L4 in
// us-central1, about $0.71/h, ahead of g2-standard-8.
func TestCheapestL4InUSCentral1IsG2Standard4(t *testing.T) {
	c, err := embeddedCatalog()
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{name: ID, catalog: c}
	offers, err := p.Plan(context.Background(), &provider.ResourceRequest{GPU: "L4", GPUCount: 1, Regions: []string{"us-central1"}})
	if err != nil || len(offers) == 0 {
		t.Fatalf("plan: %v, %v", offers, err)
	}
	first := offers[0]
	if first.InstanceType != "g2-standard-4" || first.VCPUs != 4 || first.MemoryGB != 16 ||
		first.PricePerHour < 0.70 || first.PricePerHour > 0.72 {
		t.Fatalf("cheapest L4 in us-central1: %s at $%.5f", first.InstanceType, first.PricePerHour)
	}
	for _, o := range offers {
		if o.InstanceType == "g2-standard-8" && o.PricePerHour <= first.PricePerHour {
			t.Fatalf("g2-standard-8 at $%.5f is not dearer", o.PricePerHour)
		}
	}
}
