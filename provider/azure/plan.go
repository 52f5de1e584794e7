package azure

//go:generate go run ./internal/gencatalog -catalog catalog.json

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"slices"
	"strings"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure/internal/catalog"
)

//go:embed catalog.json
var catalogJSON []byte

func embeddedCatalog() (*catalog.Catalog, error) { return catalog.Parse(catalogJSON) }

// CatalogInfo returns the embedded catalog's source and retrieval date.
func CatalogInfo() (source, retrieved string) {
	c, err := embeddedCatalog()
	if err != nil {
		return "", ""
	}
	return c.Source, c.Retrieved
}

// offerDetail is Offer.Detail: what Create needs.
type offerDetail struct {
	Size string `json:"size"`
}

// Plan lists the catalog's sizes that satisfy req, one offer per region
// (per configured zone when zones are configured) and per pricing (Spot
// only with Config.Spot and a recorded Spot price), cheapest first, then
// by region, zone and size. Each offer's Family is the size's vCPU quota
// family from the catalog, which a family quota refusal blocks. It creates
// nothing and calls nothing.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	offers := []provider.Offer{}
	for _, s := range p.catalog.Sizes {
		detail, err := json.Marshal(offerDetail{Size: s.Name})
		if err != nil {
			return nil, p.errorf(provider.Failed, "plan", "encode offer detail: %w", err)
		}
		for _, rp := range s.Regions {
			for _, zone := range p.zones(rp.Region) {
				for _, spot := range []bool{false, true} {
					price := rp.OnDemand
					if spot {
						if !p.cfg.Spot || rp.Spot <= 0 {
							continue
						}
						price = rp.Spot
					}
					o := provider.Offer{
						Provider: p.name, Location: provider.Location{Region: rp.Region, Zone: zone},
						InstanceType: s.Name, GPU: s.GPU, GPUCount: s.GPUCount, GPUMemoryGB: s.GPUMemoryGB,
						VCPUs: s.VCPUs, MemoryGB: s.MemoryGB, PricePerHour: price, Spot: spot, Family: s.Family, Detail: detail,
						DiskGB: p.cfg.DiskSizeGB, // Create makes the OS disk as large as the request's
					}
					if r.Accepts(&o) {
						offers = append(offers, o)
					}
				}
			}
		}
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.PricePerHour, b.PricePerHour), cmp.Compare(a.Location.Region, b.Location.Region),
			cmp.Compare(a.Location.Zone, b.Location.Zone), strings.Compare(a.InstanceType, b.InstanceType),
			cmp.Compare(boolInt(a.Spot), boolInt(b.Spot)))
	})
	return offers, nil
}

// zones are the offer zones of region: "" (regional) or region-<n> per
// configured zone.
func (p *Provider) zones(region string) []string {
	if len(p.cfg.Zones) == 0 {
		return []string{""}
	}
	out := make([]string, len(p.cfg.Zones))
	for i, z := range p.cfg.Zones {
		out[i] = region + "-" + z
	}
	return out
}

// regions are the configured regions, or every region of the catalog.
func (p *Provider) regions() []string {
	if len(p.cfg.Regions) > 0 {
		return p.cfg.Regions
	}
	var out []string
	for _, s := range p.catalog.Sizes {
		for _, r := range s.Regions {
			if !slices.Contains(out, r.Region) {
				out = append(out, r.Region)
			}
		}
	}
	slices.Sort(out)
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
