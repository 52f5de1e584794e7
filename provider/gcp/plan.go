package gcp

//go:generate go run ./internal/gencatalog -catalog catalog.json

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
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
	MachineType string `json:"machine_type"`
	// Accelerator and Count are set for N1 shapes, whose GPUs are attached
	// through guestAccelerators.
	Accelerator string `json:"accelerator,omitempty"`
	Count       int    `json:"count,omitempty"`
	// Reservation is the reservation a reservation offer launches into;
	// ReservationSpecific says only a launch naming it may use it.
	Reservation         string `json:"reservation,omitempty"`
	ReservationSpecific bool   `json:"reservation_specific,omitempty"`
	// NoReservation is set on the offers of a request that forbids
	// reserved capacity: Create then keeps the instance out of the
	// project's open reservations (Create does not see the request).
	NoReservation bool `json:"no_reservation,omitempty"`
	// FlexStartSeconds, when positive, makes Create launch a Flex-start
	// VM with this maxRunDuration (Offer.MaxRunDuration in whole seconds,
	// as the API takes it).
	FlexStartSeconds int64 `json:"flex_start_seconds,omitempty"`
}

// Plan lists the catalog's shapes that satisfy req as one offer per zone,
// cheapest first (then by region and zone), in the configured regions and
// zones when req names no region. Spot offers appear only with Config.Spot
// and a recorded Spot price. With Config.Refine it first asks the API which
// zones offer each accelerator; if that fails it uses the catalog's zones.
//
// Unless req forbids reserved capacity (and names no reservation), it also
// lists the project's reservations (reservations.aggregatedList, one call)
// and offers each READY one of a catalog shape in those regions, full ones
// included (see reservationOffers); a reservation req names that cannot
// serve it is an InvalidRequest error naming it. A request that forbids
// reserved capacity makes no such call, and its offers launch with
// NO_RESERVATION. It creates nothing.
//
// A request with FlexStart gets flex-start offers only: one per zone of
// each catalog shape of a series that runs as Flex-start VMs (A4, A3, A2,
// G2; not N1), on demand, at the on-demand price, with MaxRunDuration =
// req.FlexStart, and no reservation offer. A FlexStart under 10 minutes or
// over 7 days (Compute Engine's bounds for maxRunDuration) is an
// InvalidRequest error naming the bound.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	var live map[string]map[string]bool // accelerator type → zones
	if p.cfg.Refine {
		z, err := p.acceleratorZones(ctx)
		if err != nil {
			p.log.Warn("gcp: zone refinement failed; using the catalog's zones", "provider", p.name, "err", err)
		} else {
			live = z
		}
	}
	flex := req.FlexStart > 0
	if flex {
		if err := p.checkFlexStart(req.FlexStart); err != nil {
			return nil, err
		}
	}
	r := *req
	if len(r.Regions) == 0 {
		r.Regions = p.allowedRegions()
	}
	offers := []provider.Offer{}
	for i := range p.catalog.MachineTypes {
		m := &p.catalog.MachineTypes[i]
		if flex && !flexSupported(m.Name) {
			continue
		}
		d := offerDetail{MachineType: m.Name, NoReservation: req.Reserved == provider.ForbidReserved || flex}
		if flex {
			d.FlexStartSeconds = int64(req.FlexStart / time.Second)
		}
		if m.Attached {
			d.Accelerator, d.Count = m.AcceleratorType, m.GPUCount
		}
		detail, err := json.Marshal(d)
		if err != nil {
			return nil, p.errorf(provider.Failed, "plan", "encode offer detail: %w", err)
		}
		for _, rp := range m.Regions {
			for _, zone := range p.zones(rp, live, m.AcceleratorType) {
				for _, spot := range []bool{false, true} {
					// A flex-start offer is priced at the on-demand list
					// price: Google bills Flex-start VMs of A4, A3 and A2
					// at a discount ("About Flex-start VMs") but the
					// catalog's source carries no citable Flex-start
					// figure, so the offer states the most it costs.
					price := rp.OnDemand
					if spot {
						if flex || !p.cfg.Spot || rp.Spot <= 0 {
							continue
						}
						price = rp.Spot
					}
					o := provider.Offer{
						Provider: p.name, Location: provider.Location{Region: rp.Region, Zone: zone},
						InstanceType: m.InstanceType(), GPU: m.GPU, GPUCount: m.GPUCount, GPUMemoryGB: m.GPUMemoryGB,
						VCPUs: m.VCPUs, MemoryGB: m.MemoryGB, PricePerHour: price, Spot: spot, Detail: detail,
						DiskGB: p.cfg.DiskSizeGB, // the configured boot disk; Create makes it as large as the request's
						Family: gpuQuotaMetric[m.AcceleratorType],
					}
					if flex {
						o.MaxRunDuration, o.Family = req.FlexStart, flexFamily(o.Family)
					}
					if r.Accepts(&o) {
						offers = append(offers, o)
					}
				}
			}
		}
	}
	// A Flex-start VM consumes no reservation (NO_RESERVATION): a
	// flex-start request makes no reservation call.
	if !flex && (req.Reserved != provider.ForbidReserved || req.Reservation != "") {
		reserved, err := p.reservationOffers(ctx, req, &r)
		if err != nil {
			return nil, err
		}
		for i := range reserved {
			if r.Accepts(&reserved[i]) {
				offers = append(offers, reserved[i])
			}
		}
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.MarginalPrice(), b.MarginalPrice()), cmp.Compare(a.PricePerHour, b.PricePerHour),
			cmp.Compare(a.Location.Region, b.Location.Region),
			cmp.Compare(a.Location.Zone, b.Location.Zone), strings.Compare(a.InstanceType, b.InstanceType))
	})
	return offers, nil
}

// gpuQuotaMetric maps an accelerator type to the regional quota metric that
// counts its GPUs, Offer.Family: a QUOTA_EXCEEDED on that metric (or on its
// PREEMPTIBLE_ twin, for Spot) blocks that GPU model's offers in the region
// and no other (quotaScope). The names are those of "Allocation quotas"
// (Compute Engine documentation, GPU quota: one quota per GPU model and
// region) and of the discovery document's Quota.metric enum (NVIDIA_L4_GPUS,
// NVIDIA_A100_GPUS, NVIDIA_A100_80GB_GPUS, NVIDIA_T4_GPUS, …); the H100
// metrics, which that enum does not list, are the ones the Quotas page
// shows for A3 High and A3 Mega.
var gpuQuotaMetric = map[string]string{
	"nvidia-l4":             "NVIDIA_L4_GPUS",
	"nvidia-tesla-a100":     "NVIDIA_A100_GPUS",
	"nvidia-a100-80gb":      "NVIDIA_A100_80GB_GPUS",
	"nvidia-h100-80gb":      "NVIDIA_H100_GPUS",
	"nvidia-h100-mega-80gb": "NVIDIA_H100_MEGA_GPUS",
	"nvidia-tesla-t4":       "NVIDIA_T4_GPUS",
	"nvidia-tesla-v100":     "NVIDIA_V100_GPUS",
	"nvidia-tesla-p100":     "NVIDIA_P100_GPUS",
	"nvidia-tesla-p4":       "NVIDIA_P4_GPUS",
}

// allowedRegions is the configured regions plus the regions of the
// configured zones; nil means all.
func (p *Provider) allowedRegions() []string {
	if len(p.cfg.Regions) == 0 && len(p.cfg.Zones) == 0 {
		return nil
	}
	rs := slices.Clone(p.cfg.Regions)
	for _, z := range p.cfg.Zones {
		if r := catalog.RegionOf(z); !slices.Contains(rs, r) {
			rs = append(rs, r)
		}
	}
	return rs
}

// zones returns the zones of rp to offer: the catalog's (or, refined, the
// live ones of rp's region), narrowed to the configured zones of that
// region if any.
func (p *Provider) zones(rp catalog.RegionPrice, live map[string]map[string]bool, accel string) []string {
	zs := rp.Zones
	if live != nil {
		zs = nil
		for z := range live[accel] {
			if catalog.RegionOf(z) == rp.Region {
				zs = append(zs, z)
			}
		}
		slices.Sort(zs)
	}
	var pinned []string
	for _, z := range p.cfg.Zones {
		if catalog.RegionOf(z) == rp.Region {
			pinned = append(pinned, z)
		}
	}
	if len(pinned) == 0 {
		return zs
	}
	return slices.DeleteFunc(slices.Clone(zs), func(z string) bool { return !slices.Contains(pinned, z) })
}

// acceleratorZones lists, in one aggregated call (all pages), the zones
// that offer each NVIDIA accelerator type (deprecated-and-deleted ones
// excluded).
func (p *Provider) acceleratorZones(ctx context.Context) (map[string]map[string]bool, error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	it := p.accelTypes.AggregatedList(ctx, &computepb.AggregatedListAcceleratorTypesRequest{
		Project: p.cfg.Project,
	}, noRetry)
	out := map[string]map[string]bool{}
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			return out, nil
		}
		if err != nil {
			return nil, p.classify("plan", err)
		}
		for _, at := range pair.Value.GetAcceleratorTypes() {
			if !strings.HasPrefix(at.GetName(), "nvidia-") {
				continue
			}
			if at.GetDeprecated().GetState() == "DELETED" || at.GetDeprecated().GetState() == "OBSOLETE" {
				continue
			}
			zone := lastSegment(at.GetZone())
			if out[at.GetName()] == nil {
				out[at.GetName()] = map[string]bool{}
			}
			out[at.GetName()][zone] = true
		}
	}
}

// lastSegment returns what follows the last slash of a resource URL.
func lastSegment(s string) string {
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func proto[T any](v T) *T { return &v }
