package azure_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/jarcoal/httpmock"

	"github.com/org/gpuprov/provider"
	"github.com/org/gpuprov/provider/azure"
)

var h200 = provider.ResourceRequest{GPU: "H200", GPUCount: 8}

// reservedCloud is a mock subscription with the capacity reservation
// group gpu-crg in eastus2 (resource group capacity): two ND H200 v5 in
// zone 1, one of them taken by a VM, and, in another group of the same
// name elsewhere, nothing the tests name.
func reservedCloud(t *testing.T) (*cloud, *httpmock.MockTransport, *group) {
	c, mt := newCloud(t)
	c.addGroup("other", "batch-crg", "westus3", &slot{name: "t4", size: "Standard_NC4as_T4_v3", capacity: 4})
	g := c.addGroup("capacity", "gpu-crg", "eastus2", &slot{name: "h200-z1", size: "Standard_ND96isr_H200_v5", zone: "1", capacity: 2,
		allocated: []string{"/subscriptions/" + subscription + "/resourceGroups/jobs/providers/Microsoft.Compute/virtualMachines/train-0"}})
	return c, mt, g
}

// checkedProvider is c's provider whose calls all pass through the
// Compute specification's checks (spec_test.go).
func (c *cloud) checkedProvider(t *testing.T, mt *httpmock.MockTransport, cfg azure.Config, opts ...azure.Option) *azure.Provider {
	return c.provider(t, mt, cfg, append(opts, azure.WithEndpoint(endpoint, &http.Client{Transport: checked(t, mt)}))...)
}

// capacityCalls are the mock's requests as "METHOD path?$expand", in order.
func (c *cloud) capacityCalls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.requests {
		s := r.Method + " " + strings.TrimPrefix(r.Path, "/subscriptions/"+subscription)
		if e := r.Query.Get("$expand"); e != "" {
			s += "?$expand=" + e
		}
		if v := r.Query.Get("api-version"); v != "2024-11-01" && strings.Contains(r.Path, "Microsoft.Compute") {
			s += " api-version=" + v
		}
		out = append(out, s)
	}
	return out
}

func reservedOffers(offers []provider.Offer) []provider.Offer {
	var out []provider.Offer
	for _, o := range offers {
		if o.Reservation != nil {
			out = append(out, o)
		}
	}
	return out
}

// A request that names the group gets its reservation as an offer, and
// only it (ResourceRequest.Accepts: a named reservation alone): the
// group's name as the reservation id, targeted, 2 slots of which 1 free,
// in the reservation's zone, at the size's list price but no marginal
// price. Plan lists the groups, the group's
// reservations and its instance view, each call as the specification
// documents it.
func TestPlanNamedReservation(t *testing.T) {
	c, mt, _ := reservedCloud(t)
	p := c.checkedProvider(t, mt, azure.Config{Regions: []string{"eastus2"}})
	req := h200
	req.Reservation = "gpu-crg"
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	res := reservedOffers(offers)
	if len(res) != 1 {
		t.Fatalf("reservation offers %+v", offers)
	}
	o := res[0]
	want := provider.Reservation{ID: "gpu-crg", Targeted: true, Total: 2, Free: 1}
	if *o.Reservation != want || !o.InStock || o.Location != (provider.Location{Region: "eastus2", Zone: "eastus2-1"}) ||
		o.InstanceType != "Standard_ND96isr_H200_v5" || o.PricePerHour != 84.8 || o.MarginalPrice() != 0 ||
		o.Family != "standardNDISRH200V5Family" || o.Spot || o.VCPUs != 96 {
		t.Fatalf("reservation offer %+v (%+v)", o, *o.Reservation)
	}
	if !strings.Contains(o.Key(), "res:gpu-crg") {
		t.Fatalf("key %s", o.Key())
	}
	if len(offers) != 1 {
		t.Fatalf("want the reservation alone, got %d offers", len(offers))
	}
	wantCalls := []string{
		"GET /providers/Microsoft.Compute/capacityReservationGroups",
		"GET /resourceGroups/capacity/providers/Microsoft.Compute/capacityReservationGroups/gpu-crg/capacityReservations",
		"GET /resourceGroups/capacity/providers/Microsoft.Compute/capacityReservationGroups/gpu-crg?$expand=instanceView",
	}
	if got := c.capacityCalls(); !slices.Equal(got, wantCalls) {
		t.Fatalf("calls\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantCalls, "\n"))
	}
	// The name is matched as ARM matches names, case aside, and kept as
	// the request spells it: the core finds the offer of the reservation
	// it named by that id.
	req.Reservation = "GPU-CRG"
	offers, err = p.Plan(context.Background(), &req)
	if err != nil || len(reservedOffers(offers)) != 1 || reservedOffers(offers)[0].Reservation.ID != "GPU-CRG" {
		t.Fatalf("case-blind name: %v %+v", err, offers)
	}
}

// A full reservation is offered with nothing free (the core tries it
// last); a list of groups over several pages is read to its end.
func TestPlanFullReservationAcrossPages(t *testing.T) {
	c, mt, g := reservedCloud(t)
	c.pageSize = 1
	g.members[0].capacity = 1
	p := c.checkedProvider(t, mt, azure.Config{})
	req := h200
	req.Reservation = "gpu-crg"
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	res := reservedOffers(offers)
	if len(res) != 1 || res[0].Reservation.Free != 0 || res[0].Reservation.Total != 1 || !res[0].Reservation.Full() || res[0].InStock {
		t.Fatalf("full reservation %+v", res)
	}
	if n := strings.Count(strings.Join(c.capacityCalls(), "\n"), "GET /providers/Microsoft.Compute/capacityReservationGroups"); n != 2 {
		t.Fatalf("%d list pages, want 2", n)
	}
}

// A named group that the subscription holds but that cannot serve the
// request is an InvalidRequest error that names it and says why; one the
// subscription does not hold is no offer and no error (another provider
// may hold it).
func TestPlanNamedReservationMismatch(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   provider.ResourceRequest
		state string
		want  []string
	}{
		{"other GPU", provider.ResourceRequest{GPU: "A100-80GB", GPUCount: 1}, "", []string{"gpu-crg", "Standard_ND96isr_H200_v5", "8 × H200", "not 1 × A100-80GB"}},
		{"other count", provider.ResourceRequest{GPU: "H200", GPUCount: 4}, "", []string{"gpu-crg", "not 4 × H200"}},
		{"zone excluded", provider.ResourceRequest{GPU: "H200", GPUCount: 8, Zones: []string{"eastus2-2"}}, "", []string{"gpu-crg", "eastus2-1", "not in zone eastus2-2"}},
		{"region excluded", provider.ResourceRequest{GPU: "H200", GPUCount: 8, Regions: []string{"westus3"}}, "", []string{"gpu-crg", "in region eastus2, not in westus3"}},
		{"not active", h200, "Updating", []string{"gpu-crg", "not active (provisioningState Updating)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, mt, g := reservedCloud(t)
			if tc.state != "" {
				g.members[0].state = tc.state
			}
			p := c.provider(t, mt, azure.Config{Regions: []string{"eastus2", "westus3"}})
			req := tc.req
			req.Reservation = "gpu-crg"
			offers, err := p.Plan(context.Background(), &req)
			pe := kindOf(t, err, provider.InvalidRequest)
			for _, w := range tc.want {
				if !strings.Contains(pe.Error(), w) {
					t.Fatalf("error %q lacks %q", pe, w)
				}
			}
			if offers != nil {
				t.Fatalf("offers with the error: %+v", offers)
			}
		})
	}
	c, mt, _ := reservedCloud(t)
	p := c.provider(t, mt, azure.Config{Regions: []string{"eastus2"}})
	req := h200
	req.Reservation = "someone-elses"
	offers, err := p.Plan(context.Background(), &req)
	if err != nil || len(offers) != 0 {
		t.Fatalf("unknown group: %v %+v", err, offers)
	}
}

// Requests that name no reservation make no reservation call: Azure's
// groups are all targeted (the core plans one only for the request that
// names it), and "forbid" needs nothing, since a VM uses a group only
// when it names it. Neither does a Spot-only request: Spot VMs cannot use
// a group.
func TestPlanReservationCalls(t *testing.T) {
	for _, req := range []provider.ResourceRequest{
		h200,
		{GPU: "H200", GPUCount: 8, Reserved: provider.ForbidReserved},
		{GPU: "H200", GPUCount: 8, Reserved: provider.RequireReserved},
		{GPU: "T4", GPUCount: 1, Spot: provider.SpotOnly, Reservation: "gpu-crg"},
	} {
		c, mt, _ := reservedCloud(t)
		p := c.provider(t, mt, azure.Config{Spot: true})
		offers, err := p.Plan(context.Background(), &req)
		if err != nil {
			t.Fatal(err)
		}
		if calls := c.capacityCalls(); len(calls) != 0 {
			t.Fatalf("%+v: calls %v", req, calls)
		}
		onDemand := req.Reserved != provider.RequireReserved && req.Reservation == ""
		if len(reservedOffers(offers)) != 0 || onDemand != (len(offers) > 0) {
			t.Fatalf("%+v: offers %+v", req, offers)
		}
	}
}

// A subscription that may not read its groups (AuthorizationFailed) gets
// a plan without them, not an error (for a named reservation: no offer,
// as for a group it does not hold); the failure is logged without the
// token.
func TestPlanReservationReadFails(t *testing.T) {
	c, mt, _ := reservedCloud(t)
	c.syncFaults["GET /capacityReservationGroups"] = []fault{{Status: 403, Code: "AuthorizationFailed",
		Message: "The client 'x' does not have authorization to perform action 'Microsoft.Compute/capacityReservationGroups/read'."}}
	var logs bytes.Buffer
	p := c.provider(t, mt, azure.Config{Regions: []string{"eastus2"}}, azure.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	req := h200
	req.Reservation = "gpu-crg"
	offers, err := p.Plan(context.Background(), &req)
	if err != nil || len(offers) != 0 {
		t.Fatalf("%v %+v", err, offers)
	}
	if l := logs.String(); !strings.Contains(l, "capacity reservation groups not read") || !strings.Contains(l, "AuthorizationFailed") ||
		strings.Contains(l, "Bearer") {
		t.Fatalf("log %s", l)
	}
}

// Create of a reservation offer names the group in the VM's
// properties.capacityReservation (a body the specification's
// CapacityReservationProfile declares), and the VM takes the group's
// free slot: the next plan shows it full. Deleting the VM frees it.
func TestCreateIntoReservation(t *testing.T) {
	c, mt, g := reservedCloud(t)
	p := c.provider(t, mt, azure.Config{Regions: []string{"eastus2"}, Zones: []string{"1"}})
	req := h200
	req.Reservation = "gpu-crg"
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	o := reservedOffers(offers)[0]
	id := launch(t, p, o, newSpec(t, "res-1"))
	var body map[string]any
	for _, r := range c.requests {
		if r.Method == http.MethodPut && strings.Contains(r.Path, "/virtualMachines/") {
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
		}
	}
	cr := obj(body, "properties", "capacityReservation")
	if got := str(cr, "capacityReservationGroup", "id"); got != c.groupID(g) {
		t.Fatalf("capacityReservation %v, want group %s", cr, c.groupID(g))
	}
	doc, _ := computeSpec(t)
	schema := doc.Components.Schemas["CapacityReservationProfile"].Value
	if err := schema.VisitJSON(cr); err != nil {
		t.Fatalf("capacityReservation does not match the specification: %v", err)
	}
	if bad := undeclared(schema, cr, "capacityReservation"); len(bad) != 0 {
		t.Fatalf("undeclared %v", bad)
	}
	if z := list(body, "zones"); len(z) != 1 || z[0] != "1" {
		t.Fatalf("zones %v", z)
	}
	c.settle()
	offers, _ = p.Plan(context.Background(), &req)
	if r := reservedOffers(offers); len(r) != 1 || r[0].Reservation.Free != 0 {
		t.Fatalf("after create: %+v", r)
	}
	if err := p.Delete(context.Background(), o.Location, "res-1", []string{id}); err != nil {
		t.Fatal(err)
	}
	c.settle()
	offers, _ = p.Plan(context.Background(), &req)
	if r := reservedOffers(offers); len(r) != 1 || r[0].Reservation.Free != 1 {
		t.Fatalf("after delete: %+v", r)
	}
	// An on-demand offer of the same size names no group.
	c.requests = nil
	od := offerIn(t, p, h200, o.Location, false)
	launch(t, p, od, newSpec(t, "od-1"))
	for _, r := range c.requests {
		if r.Method == http.MethodPut && strings.Contains(r.Path, "/virtualMachines/") && bytes.Contains(r.Body, []byte("capacityReservation")) {
			t.Fatalf("on-demand VM names a group: %s", r.Body)
		}
	}
}

// A VM of a reservation offer that fails to allocate (the group full and
// the zone out of capacity, since Azure overallocates a group) or that the
// PUT refuses for its capacityReservation (the group gone since the plan)
// is Unavailable, which blocks that offer only; the same allocation
// failure of the on-demand offer stays Capacity.
func TestCreateReservationFailures(t *testing.T) {
	c, mt, g := reservedCloud(t)
	p := c.provider(t, mt, azure.Config{Regions: []string{"eastus2"}, Zones: []string{"1"}})
	req := h200
	req.Reservation = "gpu-crg"
	offers, err := p.Plan(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	o := reservedOffers(offers)[0]
	ctx := context.Background()
	alloc := fault{Async: true, Code: "ZonalAllocationFailed",
		Message: "Allocation failed. We do not have sufficient capacity for the requested VM size in this zone."}

	c.createFaults["eastus2"] = []fault{alloc}
	spec := newSpec(t, "res-2")
	prep, err := p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(ctx, &o, prep, spec)
	if pe := kindOf(t, err, provider.Unavailable); provider.ScopeOf(pe) != provider.ScopeOffer {
		t.Fatalf("scope %s", provider.ScopeOf(pe))
	}

	od := offerIn(t, p, h200, o.Location, false)
	c.createFaults["eastus2"] = []fault{alloc}
	spec = newSpec(t, "od-2")
	prep, _ = p.Prepare(ctx, &od, spec)
	_, err = p.Create(ctx, &od, prep, spec)
	kindOf(t, err, provider.Capacity)

	c.mu.Lock()
	c.resGroups = slices.DeleteFunc(c.resGroups, func(x *group) bool { return x == g })
	c.mu.Unlock()
	spec = newSpec(t, "res-3")
	prep, _ = p.Prepare(ctx, &o, spec)
	_, err = p.Create(ctx, &o, prep, spec)
	pe := kindOf(t, err, provider.Unavailable)
	if !strings.Contains(pe.Error(), "gpu-crg") {
		t.Fatalf("error %v does not name the group", pe)
	}
}
