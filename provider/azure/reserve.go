package azure

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v6"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure/internal/catalog"
)

// An Azure capacity reservation group (CRG) holds capacity reservations,
// each a VM size, a count (sku.capacity) and at most one zone. A VM draws
// on a group only when its PUT names the group
// (properties.capacityReservation.capacityReservationGroup.id), and Azure
// then matches it to the group's reservation of its size and zone. So
// every group is targeted (provider.Reservation.Targeted), and the
// reservation a user names (ResourceRequest.Reservation) is a group's
// name. Azure lets a group take more VMs than it reserves ("Overallocate
// capacity reservation", Microsoft Learn): those run as ordinary capacity,
// without the reservation's guarantee, so a full group is not refused at
// the PUT; its VM fails to allocate only when the region has no capacity
// either.

// groupRef is one capacity reservation group as the subscription's list
// shows it.
type groupRef struct {
	ID, Name, ResourceGroup, Region string
}

// reservationOffers returns the offers of the capacity reservation group
// req names (req.Reservation) in regions: one per reservation of the group
// whose size is in the catalog, in the reservation's zone, with
// Reservation filled from the group's instance view. It makes no call when
// req names no group: Azure's groups are all targeted, and the core plans
// a targeted reservation only for the request that names it (so reading
// them for any other request would cost calls whose offers are all left
// out).
//
// It calls, each one request per page, bounded by RequestTimeout:
// CapacityReservationGroups_ListBySubscription, then for the named group
// CapacityReservations_ListByCapacityReservationGroup and
// CapacityReservationGroups_Get with $expand=instanceView.
//
// A group it finds whose reservations none fit req (another size, GPU or
// count, a zone or region req excludes, a reservation not in state
// Succeeded) is an InvalidRequest error that names the group and says
// why. A group it does not find is no offer and no error. A failure to
// read (access denied, a throttled list) is returned as readErr for Plan
// to log: it must not fail the plan.
func (p *Provider) reservationOffers(ctx context.Context, req *provider.ResourceRequest, regions []string) (offers []provider.Offer, err, readErr error) {
	name := req.Reservation
	if name == "" {
		return nil, nil, nil
	}
	groups, rerr := p.listGroups(ctx)
	if rerr != nil {
		return nil, nil, rerr
	}
	var why []string
	for _, g := range groups {
		if !strings.EqualFold(g.Name, name) {
			continue
		}
		if !slices.Contains(regions, g.Region) {
			why = append(why, fmt.Sprintf("in region %s, not in %s", g.Region, strings.Join(regions, ", ")))
			continue
		}
		members, rerr := p.readGroup(ctx, g)
		if rerr != nil {
			return nil, nil, rerr
		}
		if len(members) == 0 {
			why = append(why, fmt.Sprintf("in %s holds no capacity reservation", g.Region))
		}
		for _, m := range members {
			o, reason := p.memberOffer(req, g, m)
			if reason != "" {
				why = append(why, reason)
				continue
			}
			offers = append(offers, o)
		}
	}
	if len(offers) == 0 && len(why) > 0 {
		return nil, p.errorf(provider.InvalidRequest, "plan", "reservation %s is %s", name, strings.Join(why, "; ")), nil
	}
	return offers, nil, nil
}

// member is one capacity reservation of a group, as the adapter reads it.
type member struct {
	Name, Size, Zone, State string
	Capacity, Allocated     int
}

// memberOffer is the offer of reservation m of group g for req, or why it
// does not fit req.
func (p *Provider) memberOffer(req *provider.ResourceRequest, g groupRef, m member) (provider.Offer, string) {
	where := g.Region
	if m.Zone != "" {
		where += " zone " + m.Zone
	}
	s, ok := p.size(m.Size)
	switch {
	case !ok:
		return provider.Offer{}, fmt.Sprintf("for %s in %s, which is not a GPU size the adapter knows", m.Size, where)
	case m.State != "Succeeded":
		return provider.Offer{}, fmt.Sprintf("for %s in %s, not active (provisioningState %s)", m.Size, where, m.State)
	case (req.GPU != "" && s.GPU != req.GPU) || (req.GPUCount > 0 && s.GPUCount != req.GPUCount) || s.GPUMemoryGB < req.MinGPUMemoryGB:
		return provider.Offer{}, fmt.Sprintf("for %s (%d × %s), not %s", m.Size, s.GPUCount, s.GPU, wanted(req))
	}
	loc := provider.Location{Region: g.Region}
	if m.Zone != "" {
		loc.Zone = g.Region + "-" + m.Zone
	}
	if len(req.Zones) > 0 && !slices.Contains(req.Zones, loc.Zone) {
		if m.Zone == "" {
			return provider.Offer{}, fmt.Sprintf("for %s in %s without a zone, not in zone %s", m.Size, g.Region, strings.Join(req.Zones, ", "))
		}
		return provider.Offer{}, fmt.Sprintf("for %s in %s, not in zone %s", m.Size, loc.Zone, strings.Join(req.Zones, ", "))
	}
	detail, err := json.Marshal(offerDetail{Size: s.Name, ReservationGroup: g.ID})
	if err != nil { // a struct of strings always encodes
		return provider.Offer{}, fmt.Sprintf("cannot encode its offer: %v", err)
	}
	free := max(0, m.Capacity-m.Allocated) // Azure overallocates: more VMs than reserved is possible
	price := 0.0                           // unknown where the catalog has no price in the region
	for _, rp := range s.Regions {
		if rp.Region == g.Region {
			price = rp.OnDemand
		}
	}
	return provider.Offer{
		Provider: p.name, Location: loc, InstanceType: s.Name, GPU: s.GPU, GPUCount: s.GPUCount, GPUMemoryGB: s.GPUMemoryGB,
		VCPUs: s.VCPUs, MemoryGB: s.MemoryGB, PricePerHour: price, Family: s.Family, DiskGB: p.cfg.DiskSizeGB,
		InStock: free > 0, Detail: detail,
		// The name as the request spells it: ARM names are case-blind,
		// and the core matches the reservation it named by this id.
		Reservation: &provider.Reservation{ID: req.Reservation, Targeted: true, Total: m.Capacity, Free: free},
	}, ""
}

// wanted renders what req asks of the GPUs: "1 × A100-80GB".
func wanted(req *provider.ResourceRequest) string {
	gpu := req.GPU
	if gpu == "" {
		gpu = "any GPU"
	}
	s := gpu
	if req.GPUCount > 0 {
		s = fmt.Sprintf("%d × %s", req.GPUCount, gpu)
	}
	if req.MinGPUMemoryGB > 0 {
		s += fmt.Sprintf(" of %d GB or more", req.MinGPUMemoryGB)
	}
	return s
}

// size is the catalog's size of name (ARM compares sizes case-blind).
func (p *Provider) size(name string) (catalog.Size, bool) {
	for _, s := range p.catalog.Sizes {
		if strings.EqualFold(s.Name, name) {
			return s, true
		}
	}
	return catalog.Size{}, false
}

// listGroups lists the subscription's capacity reservation groups, every
// page (CapacityReservationGroups_ListBySubscription: ARM has no list per
// region; one list serves every region).
func (p *Provider) listGroups(ctx context.Context) ([]groupRef, error) {
	var out []groupRef
	pager := p.crgs.NewListBySubscriptionPager(nil)
	for pager.More() {
		cctx, cancel := p.call(ctx)
		page, err := pager.NextPage(cctx)
		cancel()
		if err != nil {
			return nil, p.classify("plan", fmt.Errorf("list capacity reservation groups: %w", err))
		}
		for _, g := range page.Value {
			if g == nil || g.ID == nil {
				continue
			}
			id, err := arm.ParseResourceID(*g.ID)
			if err != nil {
				return nil, p.errorf(provider.Failed, "plan", "capacity reservation group id %q: %w", *g.ID, err)
			}
			out = append(out, groupRef{ID: *g.ID, Name: id.Name, ResourceGroup: id.ResourceGroupName, Region: normRegion(deref(g.Location))})
		}
	}
	return out, nil
}

// readGroup reads g's reservations (their size, count, zone and state)
// and its instance view (the VMs allocated in each).
func (p *Provider) readGroup(ctx context.Context, g groupRef) ([]member, error) {
	var out []member
	pager := p.crs.NewListByCapacityReservationGroupPager(g.ResourceGroup, g.Name, nil)
	for pager.More() {
		cctx, cancel := p.call(ctx)
		page, err := pager.NextPage(cctx)
		cancel()
		if err != nil {
			return nil, p.classify("plan", fmt.Errorf("list capacity reservations of group %s: %w", g.Name, err))
		}
		for _, r := range page.Value {
			if r == nil || r.SKU == nil {
				continue
			}
			m := member{Name: deref(r.Name), Size: deref(r.SKU.Name), Capacity: int(deref(r.SKU.Capacity))}
			if len(r.Zones) > 0 {
				m.Zone = deref(r.Zones[0])
			}
			if r.Properties != nil {
				m.State = deref(r.Properties.ProvisioningState)
			}
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	cctx, cancel := p.call(ctx)
	defer cancel()
	got, err := p.crgs.Get(cctx, g.ResourceGroup, g.Name,
		&armcompute.CapacityReservationGroupsClientGetOptions{Expand: to(armcompute.CapacityReservationGroupInstanceViewTypesInstanceView)})
	if err != nil {
		return nil, p.classify("plan", fmt.Errorf("capacity reservation group %s: %w", g.Name, err))
	}
	allocated := map[string]int{}
	known := map[string]bool{}
	if pr := got.Properties; pr != nil && pr.InstanceView != nil {
		for _, v := range pr.InstanceView.CapacityReservations {
			if v == nil {
				continue
			}
			n := strings.ToLower(deref(v.Name))
			known[n] = true
			if v.UtilizationInfo != nil {
				allocated[n] = len(v.UtilizationInfo.VirtualMachinesAllocated)
			}
		}
	}
	for i := range out {
		n := strings.ToLower(out[i].Name)
		if !known[n] {
			// No instance view for it (made after the list): how many of
			// its slots are taken is unknown; count it full rather than
			// promise room.
			out[i].Allocated = out[i].Capacity
			continue
		}
		out[i].Allocated = allocated[n]
	}
	return out, nil
}

// normRegion is an ARM location as the adapter names regions: ARM answers
// "eastus", and in places "East US".
func normRegion(loc string) string { return strings.ToLower(strings.ReplaceAll(loc, " ", "")) }
