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
	// ReservationGroup is the resource id of the capacity reservation
	// group a reservation offer launches into; empty: none.
	ReservationGroup string `json:"reservation_group,omitempty"`
}

// Plan lists the catalog's sizes that satisfy req, one offer per region
// (per configured zone when zones are configured) and per pricing (Spot
// only with Config.Spot and a recorded Spot price), cheapest first, then
// by region, zone and size. Each offer's Family is the size's vCPU quota
// family from the catalog, which a family quota refusal blocks. It creates
// nothing.
//
// For a request that names a reservation (req.Reservation, the name of a
// capacity reservation group), it also reads that group and offers its
// reservations that fit (see reservationOffers); a group found that does
// not fit is an InvalidRequest error naming it. A failure to read the
// groups is logged and leaves the on-demand offers alone. Any other
// request makes no call: every Azure group is targeted, and Reserved
// "forbid" needs nothing of Create, since a VM uses a group only when it
// names it.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.cfg.Regions
	}
	offers := []provider.Offer{}
	if r.Reservation != "" && r.Spot != provider.SpotOnly { // Spot VMs cannot use capacity reservations
		regions := r.Regions
		if len(regions) == 0 {
			regions = p.regions()
		}
		reserved, err, readErr := p.reservationOffers(ctx, &r, regions)
		switch {
		case err != nil:
			return nil, err
		case readErr != nil && ctx.Err() != nil:
			return nil, readErr
		case readErr != nil:
			p.log.Warn("azure: capacity reservation groups not read; planning without them", "provider", p.name,
				"reservation", r.Reservation, "err", p.maskErr(readErr))
		}
		for _, o := range reserved {
			if r.Accepts(&o) {
				offers = append(offers, o)
			}
		}
	}
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
