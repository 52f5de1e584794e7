package azure_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// group is a capacity reservation group the mock holds: its reservations
// (members), each a VM size, a count and at most one zone, and the VMs
// allocated in it.
type group struct {
	rg, name, location string
	members            []*slot
}

type slot struct {
	name, size, zone, state string
	capacity                int
	allocated               []string // VM ids
}

func (c *cloud) groupID(g *group) string {
	return c.resourceID("Microsoft.Compute/capacityReservationGroups", g.rg, g.name)
}

// addGroup adds a group in location whose members are given as
// name/size/zone/capacity with state Succeeded.
func (c *cloud) addGroup(rg, name, location string, members ...*slot) *group {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range members {
		if m.state == "" {
			m.state = "Succeeded"
		}
	}
	g := &group{rg: rg, name: name, location: location, members: members}
	c.resGroups = append(c.resGroups, g)
	return g
}

// setUsages sets the usages list of region: name.value, limit, current
// value and the portal's localized name.
func (c *cloud) setUsages(region string, us ...map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.usages == nil {
		c.usages = map[string][]map[string]any{}
	}
	c.usages[region] = us
}

func usage(name, localized string, current, limit int) map[string]any {
	return map[string]any{"unit": "Count", "currentValue": current, "limit": limit,
		"name": map[string]any{"value": name, "localizedValue": localized}}
}

// serveCapacity answers the capacity reservation and usages calls, as the
// Compute REST reference (API version 2024-11-01, testdata/README.md)
// documents them: the subscription's groups (paged by nextLink, pageSize
// a page), a group with $expand=instanceView (each member's
// utilizationInfo.virtualMachinesAllocated), a group's reservations, and
// a region's usages. seg is the path after /subscriptions/{id}.
func (c *cloud) serveCapacity(req *http.Request, seg []string) (*http.Response, bool) {
	if req.Method != http.MethodGet {
		return nil, false
	}
	q := req.URL.Query()
	switch {
	case len(seg) == 3 && seg[0] == "providers" && strings.EqualFold(seg[1], "Microsoft.Compute") && strings.EqualFold(seg[2], "capacityReservationGroups"):
		from, _ := strconv.Atoi(q.Get("$skiptoken"))
		to := min(len(c.resGroups), from+c.pageSize)
		value := []any{}
		for _, g := range c.resGroups[from:to] {
			value = append(value, c.groupJSON(g, false))
		}
		page := map[string]any{"value": value}
		if to < len(c.resGroups) {
			page["nextLink"] = fmt.Sprintf("%s%s?api-version=%s&$skiptoken=%d", endpoint, req.URL.Path, q.Get("api-version"), to)
		}
		return respond(req, 200, page), true
	case len(seg) == 5 && seg[0] == "providers" && seg[2] == "locations" && seg[4] == "usages":
		value := []any{}
		for _, u := range c.usages[seg[3]] {
			value = append(value, u)
		}
		return respond(req, 200, map[string]any{"value": value}), true
	case len(seg) >= 6 && strings.EqualFold(seg[0], "resourceGroups") && strings.EqualFold(seg[3]+"/"+seg[4], "Microsoft.Compute/capacityReservationGroups"):
		g := c.group(seg[1], seg[5])
		if g == nil {
			return c.notFound(req, "Microsoft.Compute/capacityReservationGroups", seg[1], seg[5]), true
		}
		switch {
		case len(seg) == 6:
			return respond(req, 200, c.groupJSON(g, q.Get("$expand") == "instanceView")), true
		case len(seg) == 7 && seg[6] == "capacityReservations":
			value := []any{}
			for _, m := range g.members {
				value = append(value, c.slotJSON(g, m))
			}
			return respond(req, 200, map[string]any{"value": value}), true
		}
	}
	return nil, false
}

func (c *cloud) group(rg, name string) *group {
	for _, g := range c.resGroups {
		if strings.EqualFold(g.rg, rg) && strings.EqualFold(g.name, name) {
			return g
		}
	}
	return nil
}

// groupJSON is a CapacityReservationGroup: its reservations' ids, the VMs
// associated, its zones, and with instanceView each reservation's
// utilization.
func (c *cloud) groupJSON(g *group, instanceView bool) map[string]any {
	ids, vms, views, zones := []any{}, []any{}, []any{}, []any{}
	for _, m := range g.members {
		ids = append(ids, map[string]any{"id": c.groupID(g) + "/capacityReservations/" + m.name})
		alloc := []any{}
		for _, vm := range m.allocated {
			alloc = append(alloc, map[string]any{"id": vm})
			vms = append(vms, map[string]any{"id": vm})
		}
		views = append(views, map[string]any{"name": m.name,
			"utilizationInfo": map[string]any{"currentCapacity": m.capacity, "virtualMachinesAllocated": alloc}})
		if m.zone != "" {
			zones = append(zones, m.zone)
		}
	}
	props := map[string]any{"capacityReservations": ids, "virtualMachinesAssociated": vms}
	if instanceView {
		props["instanceView"] = map[string]any{"capacityReservations": views}
	}
	out := map[string]any{"id": c.groupID(g), "name": g.name, "type": "Microsoft.Compute/capacityReservationGroups",
		"location": g.location, "properties": props}
	if len(zones) > 0 {
		out["zones"] = zones
	}
	return out
}

// slotJSON is a CapacityReservation as the group's list shows it.
func (c *cloud) slotJSON(g *group, m *slot) map[string]any {
	vms := []any{}
	for _, vm := range m.allocated {
		vms = append(vms, map[string]any{"id": vm})
	}
	out := map[string]any{"id": c.groupID(g) + "/capacityReservations/" + m.name, "name": m.name,
		"type": "Microsoft.Compute/capacityReservationGroups/capacityReservations", "location": g.location,
		"sku": map[string]any{"name": m.size, "capacity": m.capacity},
		"properties": map[string]any{"reservationId": "res-" + m.name, "provisioningState": m.state,
			"provisioningTime": "2026-03-01T11:00:00Z", "virtualMachinesAssociated": vms}}
	if m.zone != "" {
		out["zones"] = []any{m.zone}
	}
	return out
}

// reservationFor finds the reservation a VM PUT draws on: the one of the
// group its properties.capacityReservation.capacityReservationGroup.id
// names whose size and zone are the VM's. A full reservation still takes
// the VM (Azure overallocates: "Overallocate capacity reservation",
// Microsoft Learn); a region without capacity is the mock's createFaults.
// A group that does not exist, or has no reservation of the VM's size and
// zone, is refused with InvalidParameter aimed at the VM's
// capacityReservation: Compute reports a bad parameter with that code and
// the parameter as target (as for vmSize, errors.go), though Azure's own
// text for this refusal was not found in its documentation.
func (c *cloud) reservationFor(req *http.Request, loc string, in map[string]any) (*slot, *http.Response) {
	id := str(in, "properties", "capacityReservation", "capacityReservationGroup", "id")
	if id == "" {
		return nil, nil
	}
	size := str(in, "properties", "hardwareProfile", "vmSize")
	zone := ""
	if zs := list(in, "zones"); len(zs) > 0 {
		zone, _ = zs[0].(string)
	}
	refuse := func(msg string) *http.Response {
		return respond(req, 400, map[string]any{"error": map[string]any{"code": "InvalidParameter", "message": msg,
			"target": "capacityReservation.capacityReservationGroup.id"}})
	}
	for _, g := range c.resGroups {
		if !strings.EqualFold(c.groupID(g), id) {
			continue
		}
		if !strings.EqualFold(g.location, loc) {
			return nil, refuse(fmt.Sprintf("Capacity reservation group %s is in %s, not %s.", id, g.location, loc))
		}
		for _, m := range g.members {
			if strings.EqualFold(m.size, size) && m.zone == zone {
				return m, nil
			}
		}
		return nil, refuse(fmt.Sprintf("Capacity reservation group %s has no capacity reservation for %s in zone %q.", id, size, zone))
	}
	return nil, refuse(fmt.Sprintf("Capacity reservation group %s was not found.", id))
}

// release takes a deleted VM out of the reservations it was allocated in.
func (c *cloud) release(vmID string) {
	for _, g := range c.resGroups {
		for _, m := range g.members {
			for i, id := range m.allocated {
				if strings.EqualFold(id, vmID) {
					m.allocated = append(m.allocated[:i], m.allocated[i+1:]...)
					break
				}
			}
		}
	}
}
