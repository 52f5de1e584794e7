package gcp

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/api/iterator"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/gcp/internal/catalog"
)

// reservationNameKey is the reservationAffinity key that targets a
// reservation by name ("Consume reservations", Compute Engine
// documentation: "key": "compute.googleapis.com/reservation-name").
const reservationNameKey = "compute.googleapis.com/reservation-name"

// Reservation affinities of an instance (ReservationAffinity.
// consumeReservationType in the discovery document).
const (
	consumeSpecific = "SPECIFIC_RESERVATION"
	consumeAny      = "ANY_RESERVATION"
	consumeNone     = "NO_RESERVATION"
)

// reservationOffers lists the project's reservations in one aggregated
// call (all pages) and returns one offer per READY reservation of a
// catalog shape in r's regions (and the configured zones), full ones
// included with Free 0. r has its Regions defaulted already; req is the
// request as the core gave it. A reservation req names that cannot serve
// it (another shape, a zone it excludes, not READY, ended) is an
// InvalidRequest error naming it; one not found is no offer and no error.
// A failed listing is logged and yields no offer: the on-demand offers
// stand without it.
func (p *Provider) reservationOffers(ctx context.Context, req, r *provider.ResourceRequest) ([]provider.Offer, error) {
	if p.reservations == nil {
		return nil, nil
	}
	all, err := p.listReservations(ctx)
	if err != nil {
		// Plan still answers with the on-demand offers: an account that
		// may not list reservations can launch on demand.
		p.log.Warn("gcp: listing reservations failed; planning without them", "provider", p.name,
			"err", p.maskErr(err))
		return nil, nil
	}
	var offers []provider.Offer
	for _, res := range all {
		named := req.Reservation != "" && res.GetName() == req.Reservation
		o, why := p.reservationOffer(res, r)
		if named {
			if why == "" {
				why = p.excludes(req, r, o)
			}
			if why != "" {
				return nil, p.errorf(provider.InvalidRequest, "plan", "reservation %s %s", res.GetName(), why)
			}
		}
		if o != nil && why == "" {
			offers = append(offers, *o)
		}
	}
	return offers, nil
}

// listReservations reads every reservation of the project.
func (p *Provider) listReservations(ctx context.Context) ([]*computepb.Reservation, error) {
	ctx, cancel := p.call(ctx)
	defer cancel()
	it := p.reservations.AggregatedList(ctx, &computepb.AggregatedListReservationsRequest{Project: p.cfg.Project}, noRetry)
	var out []*computepb.Reservation
	for {
		pair, err := it.Next()
		if err == iterator.Done {
			return out, nil
		}
		if err != nil {
			return nil, p.classify("plan", err)
		}
		out = append(out, pair.Value.GetReservations()...)
	}
}

// reservationOffer is the offer that launches into res, or why there is
// none, as the end of "reservation <name> …": a reservation that is not
// READY, has ended, holds no catalog shape, or lies outside r's regions or
// the configured zones.
func (p *Provider) reservationOffer(res *computepb.Reservation, r *provider.ResourceRequest) (*provider.Offer, string) {
	zone := lastSegment(res.GetZone())
	region := catalog.RegionOf(zone)
	if st := res.GetStatus(); st != "READY" {
		return nil, fmt.Sprintf("is %s, not READY", st)
	}
	ends, err := reservationEnd(res)
	if err != nil {
		return nil, err.Error()
	}
	if !ends.IsZero() && !p.clock().Before(ends) {
		return nil, "ended at " + ends.UTC().Format(time.RFC3339)
	}
	sr := res.GetSpecificReservation()
	props := sr.GetInstanceProperties()
	m := p.catalogShape(props)
	if m == nil {
		what := props.GetMachineType()
		if what == "" {
			what = "no specific machine type"
		}
		for _, a := range props.GetGuestAccelerators() {
			what += fmt.Sprintf(" + %d × %s", a.GetAcceleratorCount(), lastSegment(a.GetAcceleratorType()))
		}
		return nil, fmt.Sprintf("is for %s, which is no GPU shape of gpuprov's GCP catalog", what)
	}
	if len(r.Regions) > 0 && !slices.Contains(r.Regions, region) {
		return nil, fmt.Sprintf("is in %s, outside the regions %s", zone, strings.Join(r.Regions, ", "))
	}
	if pinned := p.pinnedZones(region); len(pinned) > 0 && !slices.Contains(pinned, zone) {
		return nil, fmt.Sprintf("is in %s, outside the configured zones %s", zone, strings.Join(pinned, ", "))
	}
	d := offerDetail{MachineType: m.Name, Reservation: res.GetName(), ReservationSpecific: res.GetSpecificReservationRequired()}
	if m.Attached {
		d.Accelerator, d.Count = m.AcceleratorType, m.GPUCount
	}
	detail, err := json.Marshal(d)
	if err != nil {
		return nil, "cannot be encoded: " + err.Error()
	}
	total := int(sr.GetCount())
	free := max(total-int(sr.GetInUseCount()), 0)
	var price float64 // unknown where the catalog has no price in the region
	for _, rp := range m.Regions {
		if rp.Region == region {
			price = rp.OnDemand
		}
	}
	return &provider.Offer{
		Provider: p.name, Location: provider.Location{Region: region, Zone: zone},
		InstanceType: m.InstanceType(), GPU: m.GPU, GPUCount: m.GPUCount, GPUMemoryGB: m.GPUMemoryGB,
		VCPUs: m.VCPUs, MemoryGB: m.MemoryGB, PricePerHour: price, Detail: detail,
		DiskGB: p.cfg.DiskSizeGB, Family: gpuQuotaMetric[m.AcceleratorType], InStock: free > 0,
		Reservation: &provider.Reservation{ID: res.GetName(), Targeted: res.GetSpecificReservationRequired(),
			Total: total, Free: free, Ends: ends},
	}, ""
}

// catalogShape is the catalog shape a reservation's instance properties
// describe: its machine type, and for N1 its guest accelerators; nil when
// the catalog has none.
func (p *Provider) catalogShape(props *computepb.AllocationSpecificSKUAllocationReservedInstanceProperties) *catalog.MachineType {
	mt := lastSegment(props.GetMachineType())
	accels := props.GetGuestAccelerators()
	for i := range p.catalog.MachineTypes {
		m := &p.catalog.MachineTypes[i]
		if m.Name != mt {
			continue
		}
		switch {
		case !m.Attached && len(accels) == 0:
			return m
		case m.Attached && len(accels) == 1 && lastSegment(accels[0].GetAcceleratorType()) == m.AcceleratorType &&
			int(accels[0].GetAcceleratorCount()) == m.GPUCount:
			return m
		}
	}
	return nil
}

// excludes says why the offer of a reservation the request names does not
// serve req ("" when it does): the fields Accepts compares, said so that
// the user learns what to change.
func (p *Provider) excludes(req, r *provider.ResourceRequest, o *provider.Offer) string {
	shape := fmt.Sprintf("%s (%d × %s)", o.InstanceType, o.GPUCount, o.GPU)
	switch {
	case req.GPU != "" && o.GPU != req.GPU:
		return fmt.Sprintf("is for %s, not %s", shape, req.GPU)
	case req.GPUCount > 0 && o.GPUCount != req.GPUCount:
		return fmt.Sprintf("is for %s, not %d GPUs", shape, req.GPUCount)
	case req.MinGPUMemoryGB > 0 && o.GPUMemoryGB < req.MinGPUMemoryGB:
		return fmt.Sprintf("is for %s with %d GB per GPU, not at least %d GB", shape, o.GPUMemoryGB, req.MinGPUMemoryGB)
	case o.VCPUs < req.MinVCPUs || o.MemoryGB < req.MinMemoryGB:
		return fmt.Sprintf("is for %s with %d vCPUs and %g GB, not at least %d vCPUs and %g GB",
			shape, o.VCPUs, o.MemoryGB, req.MinVCPUs, req.MinMemoryGB)
	case req.Spot == provider.SpotOnly:
		// "You can't consume a reservation to create Spot VMs or
		// preemptible instances" (Consume reservations, Limitations).
		return "holds on-demand capacity, not Spot: Compute Engine launches no Spot VM into a reservation"
	case len(r.Regions) > 0 && !slices.Contains(r.Regions, o.Location.Region):
		return fmt.Sprintf("is in %s, not in the regions %s", o.Location.Zone, strings.Join(r.Regions, ", "))
	case len(req.Zones) > 0 && !slices.Contains(req.Zones, o.Location.Zone):
		return fmt.Sprintf("is in %s, not in the zones %s", o.Location.Zone, strings.Join(req.Zones, ", "))
	}
	return ""
}

// reservationEnd is when res is deleted: deleteAtTime, else creation plus
// deleteAfterDuration; zero when neither is set (it lasts until deleted).
func reservationEnd(res *computepb.Reservation) (time.Time, error) {
	if s := res.GetDeleteAtTime(); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return time.Time{}, fmt.Errorf("has a deleteAtTime %q that is no RFC 3339 time", s)
		}
		return t, nil
	}
	if d := res.GetDeleteAfterDuration(); d != nil && (d.GetSeconds() > 0 || d.GetNanos() > 0) {
		created, err := time.Parse(time.RFC3339, res.GetCreationTimestamp())
		if err != nil {
			return time.Time{}, fmt.Errorf("has a deleteAfterDuration but a creationTimestamp %q that is no RFC 3339 time",
				res.GetCreationTimestamp())
		}
		return created.Add(time.Duration(d.GetSeconds())*time.Second + time.Duration(d.GetNanos())), nil
	}
	return time.Time{}, nil
}

// pinnedZones are the configured zones of region; empty: every zone.
func (p *Provider) pinnedZones(region string) []string {
	var out []string
	for _, z := range p.cfg.Zones {
		if catalog.RegionOf(z) == region {
			out = append(out, z)
		}
	}
	return out
}

// clock is the time now (WithClock).
func (p *Provider) clock() time.Time {
	if p.now == nil {
		return time.Now()
	}
	return p.now()
}

// reservationAffinity is what Create sends for d: the reservation by name
// when only launches naming it may use it, ANY_RESERVATION for an open
// one (Compute Engine refuses to target by name a reservation without
// specificReservationRequired: "Specified reservations [...] can not be
// targeted as specificReservationRequired is not set", recorded in
// skypilot-org/skypilot#3327), NO_RESERVATION for a request that forbids
// reserved capacity, and nothing otherwise (GCE's default,
// ANY_RESERVATION).
func reservationAffinity(d offerDetail) *computepb.ReservationAffinity {
	switch {
	case d.Reservation != "" && d.ReservationSpecific:
		return &computepb.ReservationAffinity{ConsumeReservationType: proto(consumeSpecific),
			Key: proto(reservationNameKey), Values: []string{d.Reservation}}
	case d.Reservation != "":
		return &computepb.ReservationAffinity{ConsumeReservationType: proto(consumeAny)}
	case d.NoReservation:
		return &computepb.ReservationAffinity{ConsumeReservationType: proto(consumeNone)}
	}
	return nil
}
