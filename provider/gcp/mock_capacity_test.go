package gcp_test

import (
	"fmt"
	"net/http"
	"sort"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
)

// capacity is the part of the fake Compute Engine API that holds the
// project's reservations and quotas. Its answers have the discovery
// document's shapes (ReservationAggregatedList, Region, Project, Quota;
// TestCapacityAnswersMatchDiscovery checks them); an insert that targets a
// reservation consumes it, or fails as Compute Engine does (the operation
// error CONDITION_NOT_MET with the messages kubernetes/autoscaler's GCE
// client matches, cluster-autoscaler/cloudprovider/gce/
// autoscaling_gce_client_test.go; the synchronous 400 for an open
// reservation targeted by name, skypilot-org/skypilot#3327).
type capacity struct {
	reservations  []*computepb.Reservation      // zone is a URL, as the API gives it
	regionQuotas  map[string][]*computepb.Quota // region → quotas
	projectQuotas []*computepb.Quota
}

// reservation makes a READY reservation of count machineType VMs in zone,
// inUse of them used; targeted sets specificReservationRequired.
func reservation(name, zone, machineType string, count, inUse int64, targeted bool) *computepb.Reservation {
	return &computepb.Reservation{
		Name: proto.String(name), Kind: proto.String("compute#reservation"), Id: proto.Uint64(uint64(len(name)) * 1000003),
		Zone:              proto.String(endpoint + "/compute/v1/projects/" + project + "/zones/" + zone),
		SelfLink:          proto.String(endpoint + "/compute/v1/projects/" + project + "/zones/" + zone + "/reservations/" + name),
		Status:            proto.String("READY"),
		CreationTimestamp: proto.String("2026-11-01T08:00:00.000-07:00"),
		SpecificReservation: &computepb.AllocationSpecificSKUReservation{
			Count: proto.Int64(count), InUseCount: proto.Int64(inUse), AssuredCount: proto.Int64(count),
			InstanceProperties: &computepb.AllocationSpecificSKUAllocationReservedInstanceProperties{
				MachineType: proto.String(machineType)},
		},
		SpecificReservationRequired: proto.Bool(targeted),
	}
}

func quota(metric string, limit, usage float64) *computepb.Quota {
	return &computepb.Quota{Metric: proto.String(metric), Limit: proto.Float64(limit), Usage: proto.Float64(usage)}
}

// setReservations replaces the project's reservations.
func (c *cloud) setReservations(rs ...*computepb.Reservation) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.capacity.reservations = rs
}

// inUse returns the inUseCount of reservation name.
func (c *cloud) inUse(name string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.capacity.reservations {
		if r.GetName() == name {
			return r.GetSpecificReservation().GetInUseCount()
		}
	}
	return -1
}

// serveCapacity answers reservations.aggregatedList, regions.get and
// projects.get; nil for any other route.
func (c *cloud) serveCapacity(method string, p []string) *http.Response {
	if method != "GET" {
		return nil
	}
	switch {
	case len(p) == 2 && p[0] == "aggregated" && p[1] == "reservations":
		return msg(c.reservationList())
	case len(p) == 2 && p[0] == "regions":
		qs, ok := c.capacity.regionQuotas[p[1]]
		if !ok {
			return apiErr(404, "notFound", fmt.Sprintf("The resource 'projects/%s/regions/%s' was not found", project, p[1]))
		}
		var zones []string
		for _, z := range []string{"a", "b", "c"} {
			zones = append(zones, endpoint+"/compute/v1/projects/"+project+"/zones/"+p[1]+"-"+z)
		}
		return msg(&computepb.Region{Kind: proto.String("compute#region"), Id: proto.Uint64(1000), Name: proto.String(p[1]),
			Status: proto.String("UP"), Quotas: qs, Zones: zones,
			SelfLink: proto.String(endpoint + "/compute/v1/projects/" + project + "/regions/" + p[1])})
	case len(p) == 0:
		return msg(&computepb.Project{Kind: proto.String("compute#project"), Id: proto.Uint64(4242), Name: proto.String(project),
			Quotas: c.capacity.projectQuotas, SelfLink: proto.String(endpoint + "/compute/v1/projects/" + project)})
	}
	return nil
}

// reservationList is the aggregated answer: one scope per zone with
// reservations, in zone order.
func (c *cloud) reservationList() *computepb.ReservationAggregatedList {
	items := map[string]*computepb.ReservationsScopedList{}
	for _, r := range c.capacity.reservations {
		key := "zones/" + lastSegment(r.GetZone())
		if items[key] == nil {
			items[key] = &computepb.ReservationsScopedList{}
		}
		items[key].Reservations = append(items[key].Reservations, r)
	}
	for _, l := range items {
		sort.Slice(l.Reservations, func(i, j int) bool { return l.Reservations[i].GetName() < l.Reservations[j].GetName() })
	}
	return &computepb.ReservationAggregatedList{Kind: proto.String("compute#reservationAggregatedList"), Items: items,
		SelfLink: proto.String(endpoint + "/compute/v1/projects/" + project + "/aggregated/reservations")}
}

// consumeReservation applies an insert's reservationAffinity: a targeted
// reservation of this zone that is READY, has room and takes the machine
// type is consumed; otherwise the insert fails as Compute Engine answers.
// nil: go on with the insert.
func (c *cloud) consumeReservation(zone, requestID string, in *computepb.Instance) *http.Response {
	ra := in.GetReservationAffinity()
	if ra.GetConsumeReservationType() != "SPECIFIC_RESERVATION" || len(ra.GetValues()) != 1 {
		return nil
	}
	name := ra.GetValues()[0]
	fail := func(message string) *http.Response {
		op := c.newOp(zone, "insert", 0, &opFault{Code: "CONDITION_NOT_MET", Message: message, HTTP: 400})
		c.requestID[requestID] = op
		return msg(op)
	}
	for _, r := range c.capacity.reservations {
		if r.GetName() != name || lastSegment(r.GetZone()) != zone {
			continue
		}
		sr := r.GetSpecificReservation()
		switch {
		case !r.GetSpecificReservationRequired():
			return apiErr(400, "invalid", fmt.Sprintf("Invalid value for field 'resource.reservationAffinity': "+
				"'{  \"consumeReservationType\": \"SPECIFIC_ALLOCATION\",  \"key\": \"compute.googleapis.com/reservation-name...'. "+
				"Specified reservations [projects/%s/reservations/%s] can not be targeted as specificReservationRequired is not set", project, name))
		case r.GetStatus() != "READY":
			return fail(fmt.Sprintf("Cannot insert instance to a reservation with status: %s, as it requires reservation to be in READY state.", r.GetStatus()))
		case sr.GetInUseCount() >= sr.GetCount():
			return fail(fmt.Sprintf("Specified reservation '%s' does not have available resources for the request.", name))
		case lastSegment(in.GetMachineType()) != sr.GetInstanceProperties().GetMachineType():
			return fail(fmt.Sprintf("No available resources in specified reservations '%s'", name))
		}
		sr.InUseCount = proto.Int64(sr.GetInUseCount() + 1)
		return nil
	}
	return fail(fmt.Sprintf("Specified reservation '%s' does not exist.", name))
}
