package aws

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/org/gpuprov/provider"
)

// Capacity Blocks for ML are bought ahead, for a fixed window, and paid
// upfront; EC2 then holds them as targeted capacity reservations of
// ReservationType capacity-block, which Create launches into
// (reservations.go). BlockOfferings asks DescribeCapacityBlockOfferings,
// PurchaseBlock sends PurchaseCapacityBlock with the VM's identity and
// attempt as tags on the reservation, and FindBlock finds that reservation
// by those tags (DescribeCapacityReservations) when a purchase's answer was
// lost. The core calls PurchaseBlock only for a request that opts in with
// a price cap: a purchase is not refundable.

// LabelAttempt is the tag naming the attempt a Capacity Block was bought
// for, beside the identity tags: FindBlock looks the block up by the three.
const LabelAttempt = "gpuprov-attempt"

// blockTypes are the GPU instance types EC2 sells as Capacity Blocks:
// p4d, p5, p5e and p5en as the EC2 User Guide's "Capacity Blocks for ML"
// lists them (supported instance types and Regions; its other types,
// trn1 and trn2, have no GPU), and p6-b200, which AWS's own ParallelCluster
// buys as Capacity Blocks (aws/aws-parallelcluster#7532: "p6 capacity is
// only realistically obtainable through capacity blocks"). BlockOfferings
// asks for no other type: EC2 would answer nothing, or an error, for it.
var blockTypes = []string{"p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"}

// Capacity Block bounds, from DescribeCapacityBlockOfferings'
// CapacityDurationHours ("in 1-day increments up 14 days, and in 7-day
// increments up to 182 days") and InstanceCount ("Each Capacity Block can
// have up to 64 instances") in the EC2 API Reference, as aws-sdk-go-v2's
// ec2 types document them.
const (
	blockDay         = 24 * time.Hour
	blockDailyUpTo   = 14 * blockDay
	blockWeeklyUpTo  = 182 * blockDay
	blockMaxCount    = 64
	blockCurrencyUSD = "USD"
)

// blockReclaims is how long before a block's end EC2 starts terminating
// the instances in it (EC2 User Guide, "Work with Capacity Blocks":
// "Thirty minutes before the reservation expires, we begin to terminate
// any instances that are still running in the Capacity Block").
const blockReclaims = 30 * time.Minute

// blockHours checks q against the durations and counts EC2 sells and
// returns CapacityDurationHours and InstanceCount, or the InvalidRequest
// naming the bound q breaks.
func (p *Provider) blockHours(q provider.BlockQuery) (hours, count int32, err error) {
	count = int32(max(q.Count, 1))
	d := q.Duration
	switch {
	case q.Count < 0 || q.Count > blockMaxCount:
		return 0, 0, provider.Errorf(provider.InvalidRequest, p.name, "plan",
			"a Capacity Block holds 1 to %d instances, not %d", blockMaxCount, q.Count)
	case d <= 0 || d%blockDay != 0:
		return 0, 0, provider.Errorf(provider.InvalidRequest, p.name, "plan",
			"a Capacity Block lasts whole days (1 to 14 days, then 7-day steps up to 182 days), not %s", d)
	case d > blockWeeklyUpTo:
		return 0, 0, provider.Errorf(provider.InvalidRequest, p.name, "plan",
			"a Capacity Block lasts at most 182 days, not %d days", d/blockDay)
	case d > blockDailyUpTo && d%(7*blockDay) != 0:
		return 0, 0, provider.Errorf(provider.InvalidRequest, p.name, "plan",
			"a Capacity Block longer than 14 days lasts a whole number of weeks (21, 28, … 182 days), not %d days", d/blockDay)
	}
	return int32(d / time.Hour), count, nil
}

// BlockOfferings implements provider.BlockSeller: one
// DescribeCapacityBlockOfferings per planned region and Capacity Block
// type of req's GPU and count (blockTypes), for q's duration and count,
// starting from now and, when q.StartBefore is set, ending by
// q.StartBefore plus the duration. Each answer becomes the offer of its
// type in its zone (the zone id) with Block set, priced at the catalog's
// list price where it has one, and what PurchaseBlock needs in Detail. An
// answer in another currency than USD, or in dedicated tenancy, is left
// out. A call that fails is logged and left out; only when every call
// failed is the first error returned (a missing permission, say), so that
// the core can tell "none on sale" from "could not ask". A duration or
// count EC2 does not sell is an InvalidRequest before any call.
func (p *Provider) BlockOfferings(ctx context.Context, req *provider.ResourceRequest, q provider.BlockQuery) ([]provider.Offer, error) {
	hours, count, err := p.blockHours(q)
	if err != nil {
		return nil, err
	}
	now := p.clock.Now()
	if !q.StartBefore.IsZero() && !q.StartBefore.After(now) {
		return nil, provider.Errorf(provider.InvalidRequest, p.name, "plan",
			"a Capacity Block must start before %s, which has passed", q.StartBefore.UTC().Format(time.RFC3339))
	}
	var sellable []InstanceType
	for _, name := range blockTypes {
		t, ok := p.cat.Lookup(name)
		if !ok {
			continue
		}
		o := provider.Offer{GPU: t.GPU, GPUCount: t.GPUCount, GPUMemoryGB: gpuMemoryGB(t)}
		r := provider.ResourceRequest{GPU: req.GPU, GPUCount: req.GPUCount, MinGPUMemoryGB: req.MinGPUMemoryGB}
		if r.Accepts(&o) {
			sellable = append(sellable, t)
		}
	}
	// Accepts lets an offer with a block through only for a request that
	// asks for one: the core's does, a caller's own may not say so.
	accept := *req
	accept.Block = &q
	offers := []provider.Offer{}
	var firstErr error
	answered := false
	for _, region := range p.planRegions(req) {
		for _, t := range sellable {
			in := &ec2.DescribeCapacityBlockOfferingsInput{
				CapacityDurationHours: awssdk.Int32(hours), InstanceCount: awssdk.Int32(count),
				InstanceType: awssdk.String(t.InstanceType), StartDateRange: awssdk.Time(now),
			}
			if !q.StartBefore.IsZero() {
				in.EndDateRange = awssdk.Time(q.StartBefore.Add(q.Duration))
			}
			got, err := p.describeBlockOfferings(ctx, region, in)
			if err != nil {
				p.log.Warn("aws: reading Capacity Block offerings failed; planning without them", "provider", p.name,
					"region", region, "type", t.InstanceType, "err", err) // masked by classify
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			answered = true
			for _, bo := range got {
				o, ok, err := p.blockOffer(ctx, region, t, bo, q)
				if err != nil {
					p.log.Warn("aws: Capacity Block offering left out", "provider", p.name, "region", region,
						"offering", awssdk.ToString(bo.CapacityBlockOfferingId), "err", err)
					continue
				}
				if ok && accept.Accepts(&o) {
					offers = append(offers, o)
				}
			}
		}
	}
	if !answered && firstErr != nil {
		return nil, firstErr
	}
	slices.SortStableFunc(offers, func(a, b provider.Offer) int {
		return cmp.Or(cmp.Compare(a.Block.UpfrontFee, b.Block.UpfrontFee), a.Block.Start.Compare(b.Block.Start),
			cmp.Compare(a.Location.Region, b.Location.Region), cmp.Compare(a.Location.Zone, b.Location.Zone))
	})
	return offers, nil
}

// describeBlockOfferings pages through DescribeCapacityBlockOfferings in
// region.
func (p *Provider) describeBlockOfferings(ctx context.Context, region string, in *ec2.DescribeCapacityBlockOfferingsInput) ([]types.CapacityBlockOffering, error) {
	var all []types.CapacityBlockOffering
	err := p.call(ctx, "plan", func(ctx context.Context) error {
		pg := ec2.NewDescribeCapacityBlockOfferingsPaginator(p.ec2For(region), in)
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return err
			}
			all = append(all, out.CapacityBlockOfferings...)
		}
		return nil
	})
	return all, err
}

// blockOffer is the offer of Capacity Block offering bo of type t in
// region; ok false (logged at Debug) for one gpuprov cannot buy or use: a
// currency other than USD, a fee it cannot read, dedicated tenancy, a
// start after q.StartBefore. err is a failure to map its zone.
func (p *Provider) blockOffer(ctx context.Context, region string, t InstanceType, bo types.CapacityBlockOffering, q provider.BlockQuery) (o provider.Offer, ok bool, err error) {
	id := awssdk.ToString(bo.CapacityBlockOfferingId)
	skip := func(why string) (provider.Offer, bool, error) {
		p.log.Debug("aws: Capacity Block offering left out", "provider", p.name, "region", region, "offering", id, "why", why)
		return provider.Offer{}, false, nil
	}
	fee, perr := strconv.ParseFloat(awssdk.ToString(bo.UpfrontFee), 64)
	start, end := awssdk.ToTime(bo.StartDate), awssdk.ToTime(bo.EndDate)
	switch {
	case id == "":
		return skip("no offering id")
	case awssdk.ToString(bo.CurrencyCode) != blockCurrencyUSD:
		return skip(fmt.Sprintf("priced in %q, not USD", awssdk.ToString(bo.CurrencyCode)))
	case perr != nil || fee < 0:
		return skip(fmt.Sprintf("upfront fee %q is not an amount", awssdk.ToString(bo.UpfrontFee)))
	case bo.Tenancy != "" && bo.Tenancy != types.CapacityReservationTenancyDefault:
		return skip(fmt.Sprintf("%s tenancy (gpuprov launches on shared tenancy)", bo.Tenancy))
	case start.IsZero() || !end.After(start):
		return skip("no window")
	case !q.StartBefore.IsZero() && start.After(q.StartBefore):
		return skip("starts after " + q.StartBefore.UTC().Format(time.RFC3339))
	}
	if typ := awssdk.ToString(bo.InstanceType); typ != "" && typ != t.InstanceType {
		return skip("for " + typ + ", not " + t.InstanceType)
	}
	// The offering names its zone only; offers are located by zone id.
	ids, err := p.zoneIDsOf(ctx, "plan", region)
	if err != nil {
		return o, false, err
	}
	zone := ids[awssdk.ToString(bo.AvailabilityZone)]
	if zone == "" {
		return o, false, fmt.Errorf("zone %q is not one of %s's zones", awssdk.ToString(bo.AvailabilityZone), region)
	}
	price, src := 0.0, priceUnknown
	if ro, ok := t.Regions[region]; ok {
		price, src = ro.Price, priceCatalog
	}
	d := offerDetail{InstanceType: t.InstanceType, ZoneID: zone, PriceSource: src, BlockOffering: id,
		Platform: string(types.CapacityReservationInstancePlatformLinuxUnix)}
	o = p.offer(t, region, zone, price, false, d)
	o.Block = &provider.Block{Offering: id, Count: int(awssdk.ToInt32(bo.InstanceCount)), Start: start, End: end, UpfrontFee: fee}
	o.InStock = true // on sale when read; offerings go first come, first served
	return o, true, nil
}

// blockTags are the tags of the reservation a purchase makes: the VM's
// (as on its instance: Name, the caller's labels, the identity) and the
// attempt's.
func (p *Provider) blockTags(spec *provider.InstanceSpec) []types.Tag {
	return append(p.tags(spec), types.Tag{Key: awssdk.String(LabelAttempt), Value: awssdk.String(strconv.Itoa(spec.Attempt))})
}

// blockDetail reads the detail of a Capacity Block offer, or says why it
// is not one PurchaseBlock or FindBlock can act on.
func (p *Provider) blockDetail(offer *provider.Offer, op string) (offerDetail, error) {
	var d offerDetail
	if err := json.Unmarshal(offer.Detail, &d); err != nil || d.BlockOffering == "" || offer.Block == nil {
		return d, provider.Errorf(provider.InvalidRequest, p.name, op, "offer %s is not an AWS Capacity Block offering", offer.Key())
	}
	return d, nil
}

// PurchaseBlock implements provider.BlockSeller: PurchaseCapacityBlock of
// offer's offering for Linux/UNIX, with the VM's tags and LabelAttempt on
// the capacity reservation it makes. It returns the offer that launches
// into the bought block (see bought). An offering that is no longer on
// sale (InvalidCapacityBlockOfferingIdExpired, …NotFound) is Capacity; no
// answer, or a 5xx, is Transient, and the core asks FindBlock, never
// PurchaseBlock again. An offer already bought (Reservation set) is
// refused with InvalidRequest and nothing is sent: a block is not bought
// twice.
func (p *Provider) PurchaseBlock(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (provider.Offer, error) {
	d, err := p.blockDetail(offer, "purchase")
	if err != nil {
		return provider.Offer{}, err
	}
	if offer.Reservation != nil {
		return provider.Offer{}, provider.Errorf(provider.InvalidRequest, p.name, "purchase",
			"Capacity Block offering %s is already bought as %s", d.BlockOffering, offer.Reservation.ID)
	}
	if spec.VM == "" || spec.Attempt < 1 {
		return provider.Offer{}, provider.Errorf(provider.InvalidRequest, p.name, "purchase",
			"a Capacity Block purchase needs the VM name and attempt it is for (got %q, attempt %d)", spec.VM, spec.Attempt)
	}
	in := &ec2.PurchaseCapacityBlockInput{
		CapacityBlockOfferingId: awssdk.String(d.BlockOffering),
		InstancePlatform:        types.CapacityReservationInstancePlatform(cmp.Or(d.Platform, string(types.CapacityReservationInstancePlatformLinuxUnix))),
		TagSpecifications:       []types.TagSpecification{{ResourceType: types.ResourceTypeCapacityReservation, Tags: p.blockTags(spec)}},
	}
	var cr *types.CapacityReservation
	err = p.call(ctx, "purchase", func(ctx context.Context) error {
		out, e := p.ec2For(offer.Location.Region).PurchaseCapacityBlock(ctx, in)
		if e == nil {
			cr = out.CapacityReservation
		}
		return e
	})
	if err != nil {
		return provider.Offer{}, err
	}
	if cr == nil || awssdk.ToString(cr.CapacityReservationId) == "" {
		// Bought or not, the answer does not say which reservation: the
		// core looks for it by its tags (FindBlock).
		return provider.Offer{}, provider.Errorf(provider.Transient, p.name, "purchase",
			"PurchaseCapacityBlock of %s answered without a capacity reservation id", d.BlockOffering)
	}
	p.log.Info("aws: bought Capacity Block", "provider", p.name, "vm", spec.VM, "attempt", spec.Attempt,
		"reservation", awssdk.ToString(cr.CapacityReservationId), "offering", d.BlockOffering,
		"region", offer.Location.Region, "upfront_fee", offer.Block.UpfrontFee)
	return bought(offer, d, *cr), nil
}

// FindBlock implements provider.BlockSeller: DescribeCapacityReservations
// in offer's region filtered on the tags PurchaseBlock puts (gpuprov=<vm>,
// gpuprov-installation=<id>, gpuprov-attempt=<n>), keeping Capacity Blocks
// (ReservationType capacity-block) whose tags match (checked again here,
// so that an endpoint ignoring a filter cannot hand back another VM's
// block) and whose purchase did not fail. nil, nil when there is none.
func (p *Provider) FindBlock(ctx context.Context, offer *provider.Offer, spec *provider.InstanceSpec) (*provider.Offer, error) {
	d, err := p.blockDetail(offer, "purchase")
	if err != nil {
		return nil, err
	}
	want := map[string]string{provider.LabelVM: spec.VM, provider.LabelInstallation: p.installation, LabelAttempt: strconv.Itoa(spec.Attempt)}
	var filters []types.Filter
	for _, k := range []string{provider.LabelVM, provider.LabelInstallation, LabelAttempt} {
		filters = append(filters, filter("tag:"+k, want[k]))
	}
	crs, err := p.describeReservations(ctx, "purchase", offer.Location.Region, &ec2.DescribeCapacityReservationsInput{Filters: filters})
	if err != nil {
		return nil, err
	}
	for _, cr := range crs {
		if cr.ReservationType != types.CapacityReservationTypeCapacityBlock || !hasTags(cr.Tags, want) {
			continue
		}
		switch cr.State {
		case types.CapacityReservationStatePaymentFailed, types.CapacityReservationStateFailed,
			types.CapacityReservationStateCancelled, types.CapacityReservationStateUnavailable:
			p.log.Warn("aws: Capacity Block bought for the attempt is not usable", "provider", p.name, "vm", spec.VM,
				"attempt", spec.Attempt, "reservation", awssdk.ToString(cr.CapacityReservationId), "state", cr.State)
			continue
		}
		o := bought(offer, d, cr)
		return &o, nil
	}
	return nil, nil
}

func hasTags(tags []types.Tag, want map[string]string) bool {
	for k, v := range want {
		if tagValue(tags, k) != v {
			return false
		}
	}
	return true
}

// bought is offer once its block is bought as capacity reservation cr: the
// block kept, Reservation set (targeted, as every Capacity Block is; its
// count free; its end; reclaimed 30 minutes before it), and the detail of
// a Capacity Block reservation, so that Create launches into it on the
// capacity-block market.
func bought(offer *provider.Offer, d offerDetail, cr types.CapacityReservation) provider.Offer {
	o := *offer
	blk := *offer.Block
	o.Block = &blk
	count := int(awssdk.ToInt32(cr.TotalInstanceCount))
	if count == 0 {
		count = blk.Count
	}
	ends := awssdk.ToTime(cr.EndDate)
	if ends.IsZero() {
		ends = blk.End
	}
	o.Reservation = &provider.Reservation{ID: awssdk.ToString(cr.CapacityReservationId), Targeted: true,
		Total: count, Free: count, Ends: ends, Reclaims: blockReclaims}
	if z := awssdk.ToString(cr.AvailabilityZoneId); z != "" {
		d.ZoneID = z
		o.Location.Zone = z
	}
	d.Reservation, d.CapacityBlock = o.Reservation.ID, true
	o.Detail, _ = json.Marshal(d) // plain struct: cannot fail
	return o
}
