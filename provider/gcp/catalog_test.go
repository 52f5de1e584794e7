package gcp

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

// gpuFamily is one GPU machine family of Compute Engine: a machine series
// and the accelerator it carries, as https://cloud.google.com/compute/docs/gpus
// lists them (read 2026-12-01). A family is either listed — the catalog holds,
// for each GPU count, its smallest shape (smallest), in every region where it
// lists the family — or left out for a reason, which the catalog's note and
// the "Left out" table of docs/clouds/gcp.md both give.
type gpuFamily struct {
	name        string         // the vendor's name, as the docs' table row spells it: "A3 Ultra"
	accelerator string         // the GCE accelerator type: "nvidia-h200-141gb"
	prefix      string         // its machine types start with this: "a3-ultragpu-", "n1-"
	smallest    map[int]string // listed: per GPU count, the smallest machine type
	leftOut     string         // left out: why
}

// n1Hosts are the N1 hosts the catalog attaches GPUs to: n1-standard-4 for
// one GPU (the documented floor, see the catalog's note), then 8 vCPUs per GPU.
func n1Hosts(counts ...int) map[int]string {
	m := map[int]string{}
	for _, n := range counts {
		m[n] = "n1-standard-4"
		if n > 1 {
			m[n] = fmt.Sprintf("n1-standard-%d", 8*n)
		}
	}
	return m
}

// gpuFamilies: G2 carries 1 L4 on g2-standard-4/-8/-12/-16/-32, 2 on -24, 4
// on -48, 8 on -96; A2 Standard 1/2/4/8/16 A100 40GB on a2-highgpu-1g..8g and
// a2-megagpu-16g; A3 High and A3 Mega 8 H100 80GB (A3 High 1g/2g/4g only as
// Spot or Flex-start); N1 takes 1/2/4 T4, 1/2/4/8 V100, 1/2/4 P100, 1/2/4 P4.
var gpuFamilies = []gpuFamily{
	{name: "G2", accelerator: "nvidia-l4", prefix: "g2-",
		smallest: map[int]string{1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"}},
	{name: "A2 Standard", accelerator: "nvidia-tesla-a100", prefix: "a2-",
		smallest: map[int]string{1: "a2-highgpu-1g", 2: "a2-highgpu-2g", 4: "a2-highgpu-4g", 8: "a2-highgpu-8g", 16: "a2-megagpu-16g"}},
	{name: "A3 High", accelerator: "nvidia-h100-80gb", prefix: "a3-highgpu-", smallest: map[int]string{8: "a3-highgpu-8g"}},
	{name: "A3 Mega", accelerator: "nvidia-h100-mega-80gb", prefix: "a3-megagpu-", smallest: map[int]string{8: "a3-megagpu-8g"}},
	{name: "N1 + T4", accelerator: "nvidia-tesla-t4", prefix: "n1-", smallest: n1Hosts(1, 2, 4)},
	{name: "N1 + V100", accelerator: "nvidia-tesla-v100", prefix: "n1-", smallest: n1Hosts(1, 2, 4, 8)},
	{name: "N1 + P100", accelerator: "nvidia-tesla-p100", prefix: "n1-", smallest: n1Hosts(1, 2, 4)},
	{name: "N1 + P4", accelerator: "nvidia-tesla-p4", prefix: "n1-", smallest: n1Hosts(1, 2, 4)},

	{name: "A2 Ultra", accelerator: "nvidia-a100-80gb", prefix: "a2-ultragpu-",
		leftOut: "the mirrored A100 80GB GPU rows disagree across regions by 2.4x and no second source was found"},
	{name: "A3 Edge", accelerator: "nvidia-h100-80gb", prefix: "a3-edgegpu-",
		leftOut: "the A3 High 8g shape at the A3 High price"},
	// A3 Ultra and A4 are sold through reservations, Flex-start and Spot
	// (https://cloud.google.com/ai-hypercomputer/docs/consumption-models):
	// listed reserved-only, without a price, for Plan's reservation offers.
	{name: "A3 Ultra", accelerator: "nvidia-h200-141gb", prefix: "a3-ultragpu-", smallest: map[int]string{8: "a3-ultragpu-8g"}},
	{name: "A4", accelerator: "nvidia-b200", prefix: "a4-highgpu-", smallest: map[int]string{8: "a4-highgpu-8g"}},
	{name: "A4X", accelerator: "nvidia-gb200", prefix: "a4x-highgpu-",
		leftOut: "reservation-bound only; GB200 has no canonical GPU entry"},
	{name: "G4", accelerator: "nvidia-rtx-pro-6000", prefix: "g4-standard-",
		leftOut: "RTX PRO 6000 has no canonical GPU entry and no price in the mirrored rows"},
	{name: "GH200", accelerator: "nvidia-gh200",
		leftOut: "no Compute Engine machine carries a GH200: the GPU table's alias is not a GCE accelerator type"},
	{name: "L40S", accelerator: "nvidia-l40s",
		leftOut: "no Compute Engine machine carries an L40S: the GPU table's alias is not a GCE accelerator type"},
}

// familyOf returns the family of a catalog shape: the one whose accelerator
// the shape carries and whose prefix its machine type starts with.
func familyOf(m *catalog.MachineType) (*gpuFamily, error) {
	var found *gpuFamily
	for i := range gpuFamilies {
		f := &gpuFamilies[i]
		if f.accelerator != m.AcceleratorType || f.prefix == "" || !strings.HasPrefix(m.Name, f.prefix) {
			continue
		}
		if found != nil {
			return nil, fmt.Errorf("%s is in two families, %s and %s", m.InstanceType(), found.name, f.name)
		}
		found = f
	}
	if found == nil {
		return nil, fmt.Errorf("%s (%s) is in no family of gpuFamilies: check it against the vendor's shapes", m.InstanceType(), m.AcceleratorType)
	}
	return found, nil
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
	familyRegions := map[*gpuFamily]map[string]bool{}
	for i := range c.MachineTypes {
		m := &c.MachineTypes[i]
		f, err := familyOf(m)
		if err != nil {
			t.Error(err)
			continue
		}
		if f.leftOut != "" {
			t.Errorf("%s is listed, but its family %s is left out (%s)", m.InstanceType(), f.name, f.leftOut)
			continue
		}
		for _, r := range m.Regions {
			k := key{f.name, r.Region, m.GPUCount}
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
	for f, regions := range familyRegions {
		for n := range f.smallest {
			for r := range regions {
				k := key{f.name, r, n}
				if names := present[k]; names != nil && !names[f.smallest[n]] {
					t.Errorf("%s ×%d in %s: the smallest shape %s is missing (have %v)", f.name, n, r, f.smallest[n], names)
				}
			}
		}
		minCount := 0
		for n := range f.smallest {
			if minCount == 0 || n < minCount {
				minCount = n
			}
		}
		for r := range regions {
			if !present[key{f.name, r, minCount}][f.smallest[minCount]] {
				t.Errorf("%s is in %s without its smallest shape %s", f.name, r, f.smallest[minCount])
			}
		}
	}
	for k := range present {
		for i := range gpuFamilies {
			if f := &gpuFamilies[i]; f.name == k.family && f.smallest[k.count] == "" {
				t.Errorf("%s has %d GPUs in %s: not a count the vendor offers", k.family, k.count, k.region)
			}
		}
	}
}

// gceAccelerator is how Compute Engine spells an accelerator type.
var gceAccelerator = regexp.MustCompile(`^nvidia-[a-z0-9-]+$`)

// Every GPU whose canonical entry (provider/gpu.go) names a GCE accelerator
// type has a family row, and every family is either in the catalog or left
// out with its reason said in the catalog's note and in docs/clouds/gcp.md:
// a GPU the vendor offers cannot go missing from the catalog unremarked.
func TestEveryGPUFamilyIsListedOrLeftOut(t *testing.T) {
	c, err := embeddedCatalog()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/clouds/gcp.md")
	if err != nil {
		t.Fatal(err)
	}
	byAccelerator := map[string][]*gpuFamily{}
	for i := range gpuFamilies {
		f := &gpuFamilies[i]
		byAccelerator[f.accelerator] = append(byAccelerator[f.accelerator], f)
	}
	for _, name := range provider.GPUNames() {
		g, _ := provider.LookupGPU(name)
		for _, a := range g.Aliases {
			if gceAccelerator.MatchString(a) && byAccelerator[a] == nil {
				t.Errorf("%s names the GCE accelerator %s, which no row of gpuFamilies has: list its smallest shapes or leave it out with the reason", name, a)
			}
		}
	}
	listed := map[*gpuFamily]bool{}
	for i := range c.MachineTypes {
		if f, err := familyOf(&c.MachineTypes[i]); err == nil {
			listed[f] = true
		}
	}
	for i := range gpuFamilies {
		f := &gpuFamilies[i]
		switch {
		case (f.smallest == nil) == (f.leftOut == ""):
			t.Errorf("%s: a family is either listed (smallest) or left out (leftOut), not both or neither", f.name)
		case f.leftOut == "":
			if g, ok := provider.LookupGPU(f.accelerator); !ok {
				t.Errorf("%s: %s names no canonical GPU", f.name, f.accelerator)
			} else if !listed[f] {
				t.Errorf("%s (%s) is in no catalog shape: add its smallest shapes, or leave it out with the reason", f.name, g.Name)
			}
		default:
			mention := strings.TrimSuffix(f.prefix, "-")
			if mention == "" {
				mention = f.accelerator
			}
			if !strings.Contains(c.Note, mention) {
				t.Errorf("%s is left out, but the catalog's note does not say so (no %q)", f.name, mention)
			}
			if !strings.Contains(string(doc), "| "+f.name+" | `"+f.accelerator+"` |") {
				t.Errorf("%s is left out, but docs/clouds/gcp.md has no row \"| %s | `%s` | ...\"", f.name, f.name, f.accelerator)
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
