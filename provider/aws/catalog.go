package aws

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/org/gpuprov/provider"
)

// The embedded catalog is refreshed from the Price List API and EC2 by
// the generator (it needs AWS credentials; see its package comment).
//go:generate go run ./internal/catalog-gen -out catalog.json

//go:embed catalog.json
var catalogJSON []byte

// Catalog is the offline view of EC2's GPU instance types: what each type
// carries, its on-demand Linux price per region, and the zones that sell
// it. Plan works from it without any API call.
type Catalog struct {
	// Source names where the figures come from; AsOf when they were taken
	// (AsOfNote qualifies it); Zones says how zones are named.
	Source        string         `json:"source"`
	AsOf          string         `json:"as_of"`
	AsOfNote      string         `json:"as_of_note,omitempty"`
	Zones         string         `json:"zones,omitempty"`
	InstanceTypes []InstanceType `json:"instance_types"`
}

// InstanceType is one EC2 instance type with a GPU.
type InstanceType struct {
	InstanceType string `json:"instance_type"`
	// GPU is the canonical GPU name (see provider.LookupGPU).
	GPU          string  `json:"gpu"`
	GPUCount     int     `json:"gpu_count"`
	GPUMemoryMiB int     `json:"gpu_memory_mib"` // per GPU, as EC2 reports it
	VCPUs        int     `json:"vcpus"`
	MemoryGiB    float64 `json:"memory_gib"`
	// Regions maps a region to its price and zones.
	Regions map[string]RegionOffer `json:"regions"`
	// Note qualifies the figures (for example a price known to be stale).
	Note string `json:"note,omitempty"`
}

// RegionOffer is an instance type's on-demand Linux price in a region (USD
// per hour) and the availability-zone ids that sell it.
type RegionOffer struct {
	Price float64  `json:"price"`
	Zones []string `json:"zones"`
}

// EmbeddedCatalog returns the catalog built into the package.
func EmbeddedCatalog() (*Catalog, error) { return ParseCatalog(catalogJSON) }

// ParseCatalog decodes and checks a catalog: every GPU name canonical,
// every count, price and zone list present.
func ParseCatalog(b []byte) (*Catalog, error) {
	var c Catalog
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	for _, t := range c.InstanceTypes {
		if g, ok := provider.LookupGPU(t.GPU); !ok || g.Name != t.GPU {
			return nil, fmt.Errorf("catalog: %s: GPU %q is not a canonical GPU name", t.InstanceType, t.GPU)
		}
		if t.InstanceType == "" || t.GPUCount <= 0 {
			return nil, fmt.Errorf("catalog: entry %q lacks a type or GPU count", t.InstanceType)
		}
		for r, o := range t.Regions {
			if o.Price <= 0 || len(o.Zones) == 0 {
				return nil, fmt.Errorf("catalog: %s in %s: price %v, %d zones", t.InstanceType, r, o.Price, len(o.Zones))
			}
		}
	}
	return &c, nil
}

// Regions returns every region the catalog has a price for, sorted.
func (c *Catalog) Regions() []string {
	var out []string
	for _, t := range c.InstanceTypes {
		for r := range t.Regions {
			if !slices.Contains(out, r) {
				out = append(out, r)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Lookup returns the entry of an instance type.
func (c *Catalog) Lookup(instanceType string) (InstanceType, bool) {
	for _, t := range c.InstanceTypes {
		if t.InstanceType == instanceType {
			return t, true
		}
	}
	return InstanceType{}, false
}

// CanonicalGPU maps the GPU name and per-GPU memory EC2 reports
// (DescribeInstanceTypes GpuInfo) to a canonical GPU name: EC2 calls the
// 80 GB A100 of p4de "A100" and the 32 GB V100 of p3dn "V100", so the
// memory decides between the two sizes.
func CanonicalGPU(name string, memoryMiB int) (string, bool) {
	switch strings.ToUpper(strings.TrimSpace(name)) {
	case "A100":
		if memoryMiB >= 70000 {
			return "A100-80GB", true
		}
		return "A100-40GB", true
	case "V100":
		if memoryMiB >= 30000 {
			return "V100-32GB", true
		}
		return "V100", true
	}
	g, ok := provider.LookupGPU(name)
	return g.Name, ok
}
