// Package catalog is the offline price and shape catalog of the Azure
// adapter's GPU VM sizes, its JSON form, and the repricing of that catalog
// from the public Azure Retail Prices API (retail.go). The adapter embeds
// one catalog file; the generator in ../gencatalog refreshes its prices.
package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/org/gpuprov/provider"
)

// Catalog is the embedded list of GPU VM sizes and their pay-as-you-go
// (and, where recorded, Spot) Linux hourly prices per region.
type Catalog struct {
	// Source says where the figures come from; Retrieved is the date they
	// were read (YYYY-MM-DD). Note records what was left out and why.
	Source    string `json:"source"`
	Retrieved string `json:"retrieved"`
	Note      string `json:"note,omitempty"`
	Sizes     []Size `json:"sizes"`
}

// Size is one GPU VM size.
type Size struct {
	// Name is the ARM VM size ("Standard_NC24ads_A100_v4").
	Name string `json:"name"`
	// Series is the size series as Microsoft names it ("NC_A100_v4").
	Series string `json:"series"`
	// Family is the size's vCPU quota family as the Resource SKUs API
	// spells it (the SKU's "family": "StandardNCADSA100v4Family",
	// "Standard NCASv3_T4 Family"), which quota refusals name; empty:
	// not recorded.
	Family string `json:"family,omitempty"`
	// GPU is the canonical GPU name (provider.LookupGPU).
	GPU         string  `json:"gpu"`
	GPUCount    int     `json:"gpu_count"`
	GPUMemoryGB int     `json:"gpu_memory_gb"` // per GPU
	VCPUs       int     `json:"vcpus"`
	MemoryGB    float64 `json:"memory_gb"`
	// Spec is the Microsoft Learn page the shape was read from.
	Spec string `json:"spec"`
	// Regions are the regions with a recorded price.
	Regions []RegionPrice `json:"regions"`
}

// RegionPrice is a size's price in one region.
type RegionPrice struct {
	// Region is the ARM region name ("eastus").
	Region string `json:"region"`
	// OnDemand is the USD hourly pay-as-you-go Linux price of the VM
	// (disks, public IP and network excluded).
	OnDemand float64 `json:"on_demand"`
	// Spot is the Spot price, 0 when not recorded (no Spot offer then).
	Spot float64 `json:"spot,omitempty"`
}

var (
	sizeRE   = regexp.MustCompile(`^Standard_[A-Za-z0-9_]+$`)
	regionRE = regexp.MustCompile(`^[a-z][a-z0-9]+$`)
)

// Parse decodes and validates a catalog. Unknown keys are an error.
func Parse(b []byte) (*Catalog, error) {
	var c Catalog
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks that every size names a canonical GPU, positive counts
// and prices, and regions written as ARM names, each once.
func (c *Catalog) Validate() error {
	if c.Source == "" || c.Retrieved == "" {
		return fmt.Errorf("catalog: source and retrieved date are required")
	}
	seen := map[string]bool{}
	for _, s := range c.Sizes {
		if !sizeRE.MatchString(s.Name) {
			return fmt.Errorf("catalog: %q is not an ARM VM size name", s.Name)
		}
		if seen[s.Name] {
			return fmt.Errorf("catalog: %s listed twice", s.Name)
		}
		seen[s.Name] = true
		g, ok := provider.LookupGPU(s.GPU)
		if !ok || g.Name != s.GPU {
			return fmt.Errorf("catalog: %s: GPU %q is not a canonical name", s.Name, s.GPU)
		}
		if s.GPUCount <= 0 || s.VCPUs <= 0 || s.MemoryGB <= 0 || s.GPUMemoryGB <= 0 {
			return fmt.Errorf("catalog: %s: GPU count, vCPUs, memory and GPU memory must be positive", s.Name)
		}
		regions := map[string]bool{}
		for _, r := range s.Regions {
			if !regionRE.MatchString(r.Region) || regions[r.Region] {
				return fmt.Errorf("catalog: %s: region %q is malformed or listed twice", s.Name, r.Region)
			}
			regions[r.Region] = true
			if r.OnDemand <= 0 || r.Spot < 0 {
				return fmt.Errorf("catalog: %s in %s: needs a positive on-demand price", s.Name, r.Region)
			}
		}
	}
	return nil
}
