package aws

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// Reserved capacity on EC2 is an On-Demand Capacity Reservation (ODCR) or
// a Capacity Block for ML, which EC2 lists as a capacity reservation of
// ReservationType capacity-block. Plan reads them with
// DescribeCapacityReservations, once per region, and offers each one that
// fits the request; Create launches into it by id
// (CapacityReservationSpecification.CapacityReservationTarget), which EC2
// allows for open and targeted reservations alike, adding the
// capacity-block market type for a block.

// crIDRE is the form of a capacity reservation id. A name of another form
// is some other cloud's reservation: the adapter does not ask EC2 for it.
var crIDRE = regexp.MustCompile(`^cr-[0-9a-f]{8,17}$`)

// priceUnknown is the price source of a reservation offer whose instance
// type the catalog prices nowhere in its region (p5e and p6-b200, sold
// mostly as Capacity Blocks): PricePerHour is 0, which is also what the
// offer adds to the bill.
const priceUnknown = "unknown"

// reservationOffers returns the offers of the account's reservations that
// fit req, and the InvalidRequest error of a reservation req names that
// cannot serve it. A region whose reservations cannot be read (no
// permission, throttling, an endpoint without the call) is logged and
// left out: reservations never fail Plan.
func (p *Provider) reservationOffers(ctx context.Context, req *provider.ResourceRequest, candidates []InstanceType) ([]provider.Offer, error) {
	if req.Reservation != "" {
		return p.namedReservation(ctx, req)
	}
	var names []string
	for _, t := range candidates {
		names = append(names, t.InstanceType)
	}
	if len(names) == 0 {
		return nil, nil
	}
	filters := []types.Filter{
		{Name: awssdk.String("state"), Values: []string{string(types.CapacityReservationStateActive)}},
		{Name: awssdk.String("instance-platform"), Values: []string{string(types.CapacityReservationInstancePlatformLinuxUnix)}},
		{Name: awssdk.String("tenancy"), Values: []string{string(types.CapacityReservationTenancyDefault)}},
		{Name: awssdk.String("instance-type"), Values: names},
	}
	var offers []provider.Offer
	for _, region := range p.planRegions(req) {
		crs, err := p.describeReservations(ctx, "plan", region, &ec2.DescribeCapacityReservationsInput{Filters: filters})
		if err != nil {
			p.log.Warn("aws: reading capacity reservations failed; planning without them", "provider", p.name,
				"region", region, "err", err) // masked by classify
			continue
		}
		for _, cr := range crs {
			o, why, err := p.reservationOffer(ctx, region, cr)
			if err != nil {
				p.log.Warn("aws: capacity reservation left out", "provider", p.name, "region", region,
					"reservation", awssdk.ToString(cr.CapacityReservationId), "err", err)
				continue
			}
			if why != "" || !req.Accepts(&o) {
				continue
			}
			offers = append(offers, o)
		}
	}
	return offers, nil
}

// namedReservation looks req.Reservation up by id in every configured
// region (not only the request's, so that one in a region the request
// leaves out is named as such) and returns its offer, or an InvalidRequest
// error saying why it cannot serve req. An id no region knows, or a name
// that is not a capacity reservation id, is no offer and no error: another
// provider may hold it.
func (p *Provider) namedReservation(ctx context.Context, req *provider.ResourceRequest) ([]provider.Offer, error) {
	id := req.Reservation
	if !crIDRE.MatchString(id) {
		return nil, nil
	}
	regions := p.cfg.Regions
	if len(regions) == 0 {
		regions = p.cat.Regions()
	}
	for _, region := range regions {
		crs, err := p.describeReservations(ctx, "plan", region, &ec2.DescribeCapacityReservationsInput{CapacityReservationIds: []string{id}})
		if IsCode(err, "InvalidCapacityReservationId.NotFound") {
			continue // another region's, or none
		}
		if err != nil {
			p.log.Warn("aws: reading a named capacity reservation failed; looking in the other regions", "provider", p.name,
				"region", region, "reservation", id, "err", err)
			continue
		}
		for _, cr := range crs {
			if awssdk.ToString(cr.CapacityReservationId) != id {
				continue
			}
			o, why, err := p.reservationOffer(ctx, region, cr)
			if err != nil {
				return nil, err
			}
			if why == "" {
				why = mismatch(req, &o)
			}
			if why != "" {
				return nil, provider.Errorf(provider.InvalidRequest, p.name, "plan", "reservation %s %s", id, why)
			}
			return []provider.Offer{o}, nil
		}
	}
	return nil, nil
}

// describeReservations pages through DescribeCapacityReservations in
// region, its errors classified as op's.
func (p *Provider) describeReservations(ctx context.Context, op, region string, in *ec2.DescribeCapacityReservationsInput) ([]types.CapacityReservation, error) {
	var all []types.CapacityReservation
	err := p.call(ctx, op, func(ctx context.Context) error {
		pg := ec2.NewDescribeCapacityReservationsPaginator(p.ec2For(region), in)
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			all = append(all, out.CapacityReservations...)
		}
		return nil
	})
	return all, err
}

// reservationOffer is the offer of cr in region. why, when not empty,
// says why cr cannot be launched into by gpuprov at all (not active,
// ended, another platform or tenancy, a type the catalog does not know),
// as the end of "reservation cr-… <why>". err is a failure to map its zone.
func (p *Provider) reservationOffer(ctx context.Context, region string, cr types.CapacityReservation) (o provider.Offer, why string, err error) {
	typ := awssdk.ToString(cr.InstanceType)
	now := p.clock.Now()
	switch {
	case cr.State != types.CapacityReservationStateActive:
		if cr.ReservationType == types.CapacityReservationTypeCapacityBlock && cr.State == types.CapacityReservationStateScheduled {
			return o, fmt.Sprintf("is a Capacity Block that has not started (state %s, starts %s), not active", cr.State,
				awssdk.ToTime(cr.StartDate).UTC().Format(time.RFC3339)), nil
		}
		return o, fmt.Sprintf("is %s, not active", cr.State), nil
	case cr.EndDate != nil && !now.Before(*cr.EndDate):
		return o, "ended at " + cr.EndDate.UTC().Format(time.RFC3339), nil
	case cr.InstancePlatform != types.CapacityReservationInstancePlatformLinuxUnix:
		return o, fmt.Sprintf("is for platform %q, not Linux/UNIX (gpuprov launches Linux images)", cr.InstancePlatform), nil
	case cr.Tenancy != "" && cr.Tenancy != types.CapacityReservationTenancyDefault:
		return o, fmt.Sprintf("is for %s tenancy, not default (gpuprov launches on shared tenancy)", cr.Tenancy), nil
	case awssdk.ToString(cr.PlacementGroupArn) != "":
		return o, "is in a cluster placement group, which gpuprov does not launch into yet", nil
	}
	t, ok := p.cat.Lookup(typ)
	if !ok {
		return o, fmt.Sprintf("is for instance type %s, which has no GPU in gpuprov's AWS catalog", typ), nil
	}
	zone := awssdk.ToString(cr.AvailabilityZoneId)
	if zone == "" {
		// An endpoint that names the zone only (as Observe meets in
		// DescribeInstances): offers are located by zone id.
		ids, err := p.zoneIDsOf(ctx, "plan", region)
		if err != nil {
			return o, "", err
		}
		if zone = ids[awssdk.ToString(cr.AvailabilityZone)]; zone == "" {
			return o, "", fmt.Errorf("zone %q is not one of %s's zones", awssdk.ToString(cr.AvailabilityZone), region)
		}
	}
	price, src := 0.0, priceUnknown
	if ro, ok := t.Regions[region]; ok {
		price, src = ro.Price, priceCatalog
	}
	res := &provider.Reservation{
		ID:       awssdk.ToString(cr.CapacityReservationId),
		Targeted: cr.InstanceMatchCriteria == types.InstanceMatchCriteriaTargeted,
		Total:    int(awssdk.ToInt32(cr.TotalInstanceCount)),
		Free:     int(awssdk.ToInt32(cr.AvailableInstanceCount)),
		Ends:     awssdk.ToTime(cr.EndDate),
	}
	if cr.ReservationType == types.CapacityReservationTypeCapacityBlock {
		// EC2 User Guide, "Monitor Capacity Blocks using EventBridge":
		// forty minutes before a block ends, "any instances running in
		// the reservation will begin to terminate in 10 minutes".
		res.Reclaims = blockReclaims
	}
	d := offerDetail{InstanceType: typ, ZoneID: zone, PriceSource: src, Reservation: res.ID,
		CapacityBlock: cr.ReservationType == types.CapacityReservationTypeCapacityBlock}
	o = p.offer(t, region, zone, price, false, d)
	o.Reservation, o.InStock = res, res.Free > 0
	return o, "", nil
}

// mismatch says why the offer of a named reservation does not serve req,
// or "" when it does.
func mismatch(req *provider.ResourceRequest, o *provider.Offer) string {
	shape := fmt.Sprintf("%d × %s", o.GPUCount, o.GPU)
	switch {
	case req.GPU != "" && o.GPU != req.GPU, req.GPUCount > 0 && o.GPUCount != req.GPUCount:
		want := req.GPU
		if req.GPUCount > 0 {
			want = fmt.Sprintf("%d × %s", req.GPUCount, cmp.Or(req.GPU, "any GPU"))
		}
		return fmt.Sprintf("is for %s (%s), not %s", o.InstanceType, shape, want)
	case req.MinGPUMemoryGB > 0 && o.GPUMemoryGB < req.MinGPUMemoryGB:
		return fmt.Sprintf("is for %s (%d GB per GPU), not at least %d GB per GPU", o.InstanceType, o.GPUMemoryGB, req.MinGPUMemoryGB)
	case len(req.Regions) > 0 && !slices.Contains(req.Regions, o.Location.Region):
		return fmt.Sprintf("is in %s, not in the request's regions (%s)", o.Location.Region, strings.Join(req.Regions, ", "))
	case len(req.Zones) > 0 && !slices.Contains(req.Zones, o.Location.Zone):
		return fmt.Sprintf("is in zone %s, not in the request's zones (%s)", o.Location.Zone, strings.Join(req.Zones, ", "))
	case req.Spot == provider.SpotOnly:
		return "is on-demand capacity, not spot"
	case o.VCPUs < req.MinVCPUs || o.MemoryGB < req.MinMemoryGB:
		return fmt.Sprintf("is for %s (%d vCPUs, %v GiB), below the request's %d vCPUs, %v GB", o.InstanceType, o.VCPUs,
			o.MemoryGB, req.MinVCPUs, req.MinMemoryGB)
	case !req.Accepts(o):
		return fmt.Sprintf("is for %s (%s in %s), which the request does not accept", o.InstanceType, shape, o.Location)
	}
	return ""
}

// reservationError turns what RunInstances answered for a launch into a
// reservation into the kind the contract asks for: a reservation that
// cannot take the instance (full, gone, not started; or a stockout, which
// inside a reservation means the same) is Unavailable and blocks this
// offer only, never Capacity, which would read as the zone's stockout.
func reservationError(err error, reservation string) error {
	var pe *provider.Error
	if !errors.As(err, &pe) || (pe.Kind != provider.Capacity && pe.Kind != provider.Unavailable) {
		return err
	}
	return &provider.Error{Kind: provider.Unavailable, Op: pe.Op, Provider: pe.Provider, Block: provider.ScopeOffer,
		Err: fmt.Errorf("reservation %s cannot take the instance: %w", reservation, apiCause(err))}
}
