// Package catalog is the offline price and shape catalog of the GCP
// adapter's GPU machine types, its JSON form, and the repricing of that
// catalog from the Cloud Billing Catalog API's SKU list (billing.go). The
// adapter embeds one catalog file; the generator in ../gencatalog refreshes
// its prices.
package catalog

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/org/gpuprov/provider"
)

// Catalog is the embedded list of GPU machine types and their on-demand
// (and, where recorded, Spot) hourly prices per region.
type Catalog struct {
	// Source says where the figures come from; Retrieved is the date they
	// were read (YYYY-MM-DD). Note records what was left out and why.
	Source    string `json:"source"`
	Retrieved string `json:"retrieved"`
	Note      string `json:"note,omitempty"`
	// MachineTypes are the shapes, one per (machine type, accelerator,
	// count): N1 appears once per GPU it can carry.
	MachineTypes []MachineType `json:"machine_types"`
}

// MachineType is one GPU shape.
type MachineType struct {
	// Name is the GCE machine type ("a2-highgpu-1g", "n1-standard-8").
	Name string `json:"name"`
	// GPU is the canonical GPU name (provider.LookupGPU).
	GPU string `json:"gpu"`
	// AcceleratorType is the GCE accelerator type ("nvidia-tesla-a100").
	AcceleratorType string  `json:"accelerator_type"`
	GPUCount        int     `json:"gpu_count"`
	GPUMemoryGB     int     `json:"gpu_memory_gb"`
	VCPUs           int     `json:"vcpus"`
	MemoryGB        float64 `json:"memory_gb"`
	// Attached is true for N1 types, whose GPUs are attached through
	// guestAccelerators; A2/A3/G2 types bundle theirs.
	Attached bool `json:"attached,omitempty"`
	// SKU names the Cloud Billing SKU description prefixes the generator
	// prices this shape from.
	SKU SKURule `json:"sku"`
	// Regions are the regions with a recorded price, and the zones in each
	// that offer the shape.
	Regions []RegionPrice `json:"regions"`
	// ReservedOnly, when set, says why the shape has no list price to
	// record (the vendor sells it through reservations, Flex-start and
	// Spot, and publishes no citable price): it then has no Regions, is
	// never offered on demand or as Spot, and is planned only into a
	// reservation the account holds, with the reservation's zone.
	ReservedOnly string `json:"reserved_only,omitempty"`
}

// SKURule names the SKUs that make up a shape's price: vCPUs × Core +
// GiB × RAM + GPUs × GPU. Each is a description prefix ("A2 Instance Core",
// "Nvidia Tesla A100 GPU"); the region suffix (" running in Americas") is
// not part of it.
type SKURule struct {
	Core string `json:"core"`
	RAM  string `json:"ram"`
	GPU  string `json:"gpu"`
}

// RegionPrice is a shape's price in one region.
type RegionPrice struct {
	Region string   `json:"region"`
	Zones  []string `json:"zones"`
	// OnDemand is the USD hourly price of the whole VM: vCPUs, memory and
	// GPUs (boot disk, bundled Local SSD and network excluded).
	OnDemand float64 `json:"on_demand"`
	// Spot is the Spot VM price, 0 when not recorded (no Spot offer then).
	Spot float64 `json:"spot,omitempty"`
}

// InstanceType is the offer's instance type: the machine type, with the
// attached accelerator for N1 ("n1-standard-8+1xnvidia-tesla-t4"), so that
// two N1 shapes of one machine type are two offers.
func (m *MachineType) InstanceType() string {
	if !m.Attached {
		return m.Name
	}
	return fmt.Sprintf("%s+%dx%s", m.Name, m.GPUCount, m.AcceleratorType)
}

// Parse decodes and validates a catalog.
func Parse(b []byte) (*Catalog, error) {
	var c Catalog
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Validate checks that every shape names a canonical GPU, a positive count
// and prices, and zones that belong to their region.
func (c *Catalog) Validate() error {
	if c.Source == "" || c.Retrieved == "" {
		return fmt.Errorf("catalog: source and retrieved date are required")
	}
	seen := map[string]bool{}
	for _, m := range c.MachineTypes {
		key := m.InstanceType()
		if seen[key] {
			return fmt.Errorf("catalog: %s listed twice", key)
		}
		seen[key] = true
		g, ok := provider.LookupGPU(m.GPU)
		if !ok || g.Name != m.GPU {
			return fmt.Errorf("catalog: %s: GPU %q is not a canonical name", key, m.GPU)
		}
		if a, ok := provider.LookupGPU(m.AcceleratorType); !ok || a.Name != m.GPU {
			return fmt.Errorf("catalog: %s: accelerator %q does not name %s", key, m.AcceleratorType, m.GPU)
		}
		if m.GPUCount <= 0 || m.VCPUs <= 0 || m.MemoryGB <= 0 || m.GPUMemoryGB <= 0 {
			return fmt.Errorf("catalog: %s: count, vCPUs, memory and GPU memory must be positive", key)
		}
		if m.ReservedOnly != "" && len(m.Regions) > 0 {
			return fmt.Errorf("catalog: %s: a reserved-only shape lists no regions (it has no list price)", key)
		}
		for _, r := range m.Regions {
			if r.OnDemand <= 0 || r.Spot < 0 || len(r.Zones) == 0 {
				return fmt.Errorf("catalog: %s in %s: needs zones and a positive price", key, r.Region)
			}
			for _, z := range r.Zones {
				if RegionOf(z) != r.Region {
					return fmt.Errorf("catalog: %s: zone %s is not in region %s", key, z, r.Region)
				}
			}
		}
	}
	return nil
}

// RegionOf returns the region of a zone ("us-central1-a" → "us-central1").
func RegionOf(zone string) string {
	i := strings.LastIndexByte(zone, '-')
	if i <= 0 {
		return zone
	}
	return zone[:i]
}
