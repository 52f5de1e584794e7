package aws

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// Price sources recorded in an offer's detail.
const (
	priceCatalog     = "catalog"            // the embedded on-demand price
	priceSpotHistory = "spot-price-history" // DescribeSpotPriceHistory, now
	priceOnDemandCap = "on-demand-cap"      // spot without a live price: the on-demand price caps it
)

// offerDetail is Offer.Detail: what Prepare and Create need.
type offerDetail struct {
	InstanceType string `json:"instance_type"`
	ZoneID       string `json:"zone_id"`
	Spot         bool   `json:"spot,omitempty"`
	PriceSource  string `json:"price_source"`
	// Reservation is the capacity reservation (cr-…) Create launches
	// into, CapacityBlock whether it is a Capacity Block for ML (which
	// RunInstances takes on the capacity-block market).
	Reservation   string `json:"reservation,omitempty"`
	CapacityBlock bool   `json:"capacity_block,omitempty"`
	// NoReservation is set on the on-demand offers of a request that
	// forbids reserved capacity: Create then tells EC2 not to use an open
	// reservation (CapacityReservationPreference none), which it otherwise
	// does silently for a matching launch.
	NoReservation bool `json:"no_reservation,omitempty"`
	// BlockOffering is the Capacity Block offering (cb-…) of an offer
	// with Block set, and Platform the instance platform PurchaseBlock
	// buys it for (Linux/UNIX): see blocks.go.
	BlockOffering string `json:"block_offering,omitempty"`
	Platform      string `json:"platform,omitempty"`
}

// refinement is what live calls found in one region.
type refinement struct {
	zones map[string][]string           // type → zone ids; nil: use the catalog
	spot  map[string]map[string]float64 // type → zone id → price; nil: no live spot price
}

// Plan returns one offer per (instance type, region, zone, market) that
// satisfies req, and one per capacity reservation of the account that
// does, cheapest to launch first (a reservation adds nothing to the bill).
// It works from the embedded catalog; with Refine it asks EC2 which zones
// sell each type now and, for spot, the current spot price, falling back
// to the catalog wherever a call fails. Offline spot offers are priced at
// the on-demand price, which caps what a spot instance can cost by
// default. Unless req forbids reserved capacity, it reads the account's
// capacity reservations (reservations.go): one DescribeCapacityReservations
// per region, or, for a named reservation, that one by id. Its only error
// is the InvalidRequest of a named reservation that exists but cannot
// serve req.
func (p *Provider) Plan(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	wantOD := req.Spot == provider.OnDemand || req.Spot == provider.SpotOrOnDemand
	wantSpot := p.cfg.Spot && (req.Spot == provider.SpotOnly || req.Spot == provider.SpotOrOnDemand)
	forbid := req.Reserved == provider.ForbidReserved && req.Reservation == ""
	var candidates []InstanceType
	for _, t := range p.cat.InstanceTypes {
		o := provider.Offer{GPU: t.GPU, GPUCount: t.GPUCount, GPUMemoryGB: gpuMemoryGB(t)}
		r := provider.ResourceRequest{GPU: req.GPU, GPUCount: req.GPUCount, MinGPUMemoryGB: req.MinGPUMemoryGB}
		if r.Accepts(&o) {
			candidates = append(candidates, t)
		}
	}
	offers := []provider.Offer{}
	for _, region := range p.planRegions(req) {
		var inRegion []string
		for _, t := range candidates {
			if _, ok := t.Regions[region]; ok {
				inRegion = append(inRegion, t.InstanceType)
			}
		}
		if len(inRegion) == 0 {
			continue
		}
		var ref refinement
		if p.cfg.Refine {
			ref = p.refine(ctx, region, inRegion, wantSpot)
		}
		for _, t := range candidates {
			ro, ok := t.Regions[region]
			if !ok {
				continue
			}
			zones := ro.Zones
			if ref.zones != nil {
				zones = ref.zones[t.InstanceType]
			}
			for _, z := range zones {
				if wantOD {
					d := offerDetail{InstanceType: t.InstanceType, ZoneID: z, PriceSource: priceCatalog, NoReservation: forbid}
					offers = appendAccepted(offers, req, p.offer(t, region, z, ro.Price, false, d))
				}
				if wantSpot {
					price, src := ro.Price, priceOnDemandCap
					if sp, ok := ref.spot[t.InstanceType][z]; ok {
						price, src = sp, priceSpotHistory
					}
					d := offerDetail{InstanceType: t.InstanceType, ZoneID: z, Spot: true, PriceSource: src}
					offers = appendAccepted(offers, req, p.offer(t, region, z, price, true, d))
				}
			}
		}
	}
	if !forbid {
		reserved, err := p.reservationOffers(ctx, req, candidates)
		if err != nil {
			return nil, err
		}
		offers = append(offers, reserved...)
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.MarginalPrice(), b.MarginalPrice()), cmp.Compare(a.PricePerHour, b.PricePerHour),
			cmp.Compare(a.Location.Region, b.Location.Region), cmp.Compare(a.Location.Zone, b.Location.Zone),
			cmp.Compare(a.InstanceType, b.InstanceType))
	})
	return offers, nil
}

// planRegions is the configured regions (every catalog region when none
// is configured), narrowed to the request's regions when it names some.
func (p *Provider) planRegions(req *provider.ResourceRequest) []string {
	regions := p.cfg.Regions
	if len(regions) == 0 {
		regions = p.cat.Regions()
	}
	if len(req.Regions) == 0 {
		return regions
	}
	var out []string
	for _, r := range regions {
		if slices.Contains(req.Regions, r) {
			out = append(out, r)
		}
	}
	return out
}

// offer is the offer of type t in region and zone at price, with detail d.
func (p *Provider) offer(t InstanceType, region, zone string, price float64, spot bool, d offerDetail) provider.Offer {
	detail, _ := json.Marshal(d) // plain struct: cannot fail
	return provider.Offer{
		Provider: p.name, Location: provider.Location{Region: region, Zone: zone}, InstanceType: t.InstanceType,
		GPU: t.GPU, GPUCount: t.GPUCount, GPUMemoryGB: gpuMemoryGB(t), VCPUs: t.VCPUs, MemoryGB: t.MemoryGiB,
		PricePerHour: price, Spot: spot, Detail: detail, Family: quotaFamily(t.InstanceType),
	}
}

func appendAccepted(offers []provider.Offer, req *provider.ResourceRequest, o provider.Offer) []provider.Offer {
	if req.Accepts(&o) {
		offers = append(offers, o)
	}
	return offers
}

// quotaBuckets maps the letters that begin an instance family ("g" of
// g6e, "vt" of vt1) to the vCPU quota EC2 counts it in. The EC2 User
// Guide's "On-Demand Instance quotas" names one quota per bucket, per
// region: Running On-Demand Standard (A, C, D, H, I, M, R, T, Z)
// instances, … F instances, … G and VT instances, … Inf instances, … P
// instances, … X instances, … DL instances, … Trn instances (and its
// "Spot Instance quotas" the same buckets for Spot: All G and VT Spot
// Instance Requests, All P Spot Instance Requests, …).
var quotaBuckets = map[string]string{
	"a": "Standard", "c": "Standard", "d": "Standard", "h": "Standard", "i": "Standard", "m": "Standard",
	"r": "Standard", "t": "Standard", "z": "Standard",
	"f": "F", "g": "G", "vt": "G", "inf": "Inf", "p": "P", "x": "X", "dl": "DL", "trn": "Trn",
}

// quotaFamily returns the quota bucket of instanceType ("P" for
// p5.48xlarge, "G" for g6.xlarge and vt1.3xlarge), Offer.Family: a
// VcpuLimitExceeded blocks that bucket's offers in the region and no
// other. "" for a type whose bucket it does not know.
func quotaFamily(instanceType string) string {
	family, _, _ := strings.Cut(instanceType, ".")
	letters := family[:strings.IndexFunc(family+"0", unicode.IsDigit)] // up to the generation digit
	return quotaBuckets[letters]
}

// gpuMemoryGB is the canonical per-GPU memory of the type's GPU (EC2
// reports MiB after ECC: 22888 MiB for a 24 GB A10G).
func gpuMemoryGB(t InstanceType) int {
	if g, ok := provider.LookupGPU(t.GPU); ok {
		return g.MemoryGB
	}
	return t.GPUMemoryMiB / 1024
}

// refine asks EC2 which zones of region sell each type now and, when
// spot is wanted, the current spot prices. A call that fails leaves its
// part to the catalog: refinement never fails Plan.
func (p *Provider) refine(ctx context.Context, region string, instanceTypes []string, spot bool) refinement {
	var ref refinement
	c := p.ec2For(region)
	zones := map[string][]string{}
	in := &ec2.DescribeInstanceTypeOfferingsInput{LocationType: types.LocationTypeAvailabilityZoneId,
		Filters: []types.Filter{{Name: awssdk.String("instance-type"), Values: instanceTypes}}}
	err := p.call(ctx, "plan", func(ctx context.Context) error {
		pg := ec2.NewDescribeInstanceTypeOfferingsPaginator(c, in)
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, o := range out.InstanceTypeOfferings {
				t := string(o.InstanceType)
				zones[t] = append(zones[t], awssdk.ToString(o.Location))
			}
		}
		return nil
	})
	if err != nil {
		p.log.Warn("aws: zone refinement failed; using the catalog", "provider", p.name, "region", region, "err", err)
	} else {
		for t := range zones {
			slices.Sort(zones[t])
		}
		ref.zones = zones
	}
	if !spot {
		return ref
	}
	prices := map[string]map[string]float64{}
	var its []types.InstanceType
	for _, t := range instanceTypes {
		its = append(its, types.InstanceType(t))
	}
	sin := &ec2.DescribeSpotPriceHistoryInput{InstanceTypes: its, ProductDescriptions: []string{"Linux/UNIX"},
		StartTime: awssdk.Time(p.clock.Now())}
	err = p.call(ctx, "plan", func(ctx context.Context) error {
		pg := ec2.NewDescribeSpotPriceHistoryPaginator(c, sin)
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			for _, sp := range out.SpotPriceHistory {
				v, perr := strconv.ParseFloat(awssdk.ToString(sp.SpotPrice), 64)
				zone := awssdk.ToString(sp.AvailabilityZoneId)
				if perr != nil || v <= 0 || zone == "" {
					continue
				}
				t := string(sp.InstanceType)
				if prices[t] == nil {
					prices[t] = map[string]float64{}
				}
				if _, seen := prices[t][zone]; !seen { // newest first: keep the first
					prices[t][zone] = v
				}
			}
		}
		return nil
	})
	if err != nil {
		p.log.Warn("aws: spot price refinement failed; spot offers are priced at the on-demand cap",
			"provider", p.name, "region", region, "err", err)
		return ref
	}
	ref.spot = prices
	return ref
}
