package aws_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

// The capacity reservation tests run the adapter against the fake EC2,
// whose DescribeCapacityReservations and RunInstances follow the EC2 API
// Reference (CapacityReservation data type; RunInstances'
// CapacityReservationSpecification, serialized by aws-sdk-go-v2's ec2
// client as CapacityReservationSpecification.CapacityReservationTarget.
// CapacityReservationId and ….CapacityReservationPreference, the wire form
// asserted below). moto 5.2.1 does not implement EC2 capacity
// reservations (no DescribeCapacityReservations, no reservation targeting
// in RunInstances), so these are not checked against moto; against moto,
// Plan's reservation read fails and is left out (the moto suite still
// passes with it).

const (
	crOpen     = "cr-0000000000000a001" // us-east-1 use1-az4, p5.48xlarge, open, 1 of 4 free, ends in 30 days
	crFull     = "cr-0000000000000a002" // us-east-1 use1-az2, p5.48xlarge, open, 0 of 2 free
	crTargeted = "cr-0000000000000a003" // us-west-2 usw2-az1, p5.48xlarge, targeted, 2 of 2 free
	crL4       = "cr-0000000000000a004" // us-east-1 use1-az1, g6.xlarge, open, 1 of 1 free
	crExpired  = "cr-0000000000000a005" // us-east-1, p5.48xlarge, expired
	crWindows  = "cr-0000000000000a006" // us-east-1, p5.48xlarge, Windows
	crBlock    = "cr-0000000000000a007" // us-west-2 usw2-az3, p5e.48xlarge, Capacity Block, 1 of 1 free
	crNameOnly = "cr-0000000000000a008" // us-east-1 use1-az6 named by zone only, p5.48xlarge, open, 1 of 1 free
	crEnded    = "cr-0000000000000a009" // us-west-2, p5.48xlarge, still active but past its end date
	crUnknown  = "cr-00000000000000fff"
)

var h100x8 = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8}

func reservationsEnv(t *testing.T) *env {
	e := newEnv(t, awsConfig())
	for _, c := range []fakeCR{
		{ID: crOpen, Region: "us-east-1", ZoneID: "use1-az4", Type: "p5.48xlarge", Total: 4, Free: 1, End: t0.Add(30 * 24 * time.Hour)},
		{ID: crFull, Region: "us-east-1", ZoneID: "use1-az2", Type: "p5.48xlarge", Total: 2, Free: 0},
		{ID: crTargeted, Region: "us-west-2", ZoneID: "usw2-az1", Type: "p5.48xlarge", Criteria: "targeted", Total: 2, Free: 2},
		{ID: crL4, Region: "us-east-1", ZoneID: "use1-az1", Type: "g6.xlarge", Total: 1, Free: 1},
		{ID: crExpired, Region: "us-east-1", ZoneID: "use1-az3", Type: "p5.48xlarge", State: "expired", Total: 1},
		{ID: crWindows, Region: "us-east-1", ZoneID: "use1-az5", Type: "p5.48xlarge", Platform: "Windows", Total: 1, Free: 1},
		{ID: crBlock, Region: "us-west-2", ZoneID: "usw2-az3", Type: "p5e.48xlarge", ResType: "capacity-block", Criteria: "targeted",
			Total: 1, Free: 1, Start: t0.Add(-time.Hour), End: t0.Add(47 * time.Hour)},
		{ID: crNameOnly, Region: "us-east-1", ZoneID: "use1-az6", Type: "p5.48xlarge", Total: 1, Free: 1, NoZoneID: true},
		{ID: crEnded, Region: "us-west-2", ZoneID: "usw2-az2", Type: "p5.48xlarge", Total: 1, Free: 1, End: t0.Add(-time.Hour)},
	} {
		e.f.addReservation(c)
	}
	return e
}

func reservationIDs(offers []provider.Offer) []string {
	var ids []string
	for _, o := range offers {
		if o.Reservation != nil {
			ids = append(ids, o.Reservation.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// The account's open, active Linux reservations of the request's shape
// are offered ahead of on-demand capacity (they add nothing to the bill),
// full ones too, with Free 0; targeted, expired, ended, Windows and other
// shapes are not. One DescribeCapacityReservations per region, filtered
// on EC2's side.
func TestPlanReservations(t *testing.T) {
	e := reservationsEnv(t)
	offers := plan(t, e, h100x8)
	// The two with room come first at a marginal price of 0; the full one
	// counts at its list price (a cloud may launch it as ordinary
	// capacity), among the on-demand offers.
	if got, want := reservationIDs(offers), []string{crOpen, crFull, crNameOnly}; !slices.Equal(got, want) {
		t.Fatalf("reservation offers %v, want %v", got, want)
	}
	for i, o := range offers[:2] {
		if o.Reservation == nil || o.MarginalPrice() != 0 || o.PricePerHour != 98.32 || o.Spot || o.Family != "P" {
			t.Fatalf("offer %d: %+v, want a reservation first, at the list price 98.32 and marginal 0", i, o)
		}
	}
	byID := map[string]provider.Offer{}
	for _, o := range offers {
		if o.Reservation != nil {
			byID[o.Reservation.ID] = o
		}
	}
	open := byID[crOpen]
	// An ODCR's instances outlive its end (Reclaims 0): only a Capacity
	// Block terminates them.
	want := provider.Reservation{ID: crOpen, Total: 4, Free: 1, Ends: t0.Add(30 * 24 * time.Hour)}
	if *open.Reservation != want || !open.InStock || open.Location != (provider.Location{Region: "us-east-1", Zone: "use1-az4"}) ||
		open.VCPUs != 192 || open.GPU != "H100-80GB" {
		t.Fatalf("open reservation offer %+v (%+v)", open, open.Reservation)
	}
	if d := detail(t, open); d["reservation"] != crOpen || d["no_reservation"] != nil {
		t.Fatalf("detail %v", d)
	}
	if full := byID[crFull]; full.InStock || full.Reservation.Free != 0 || full.Reservation.Total != 2 || !full.Reservation.Ends.IsZero() ||
		full.MarginalPrice() != 98.32 {
		t.Fatalf("full reservation offer %+v (%+v)", full, full.Reservation)
	}
	if z := byID[crNameOnly].Location.Zone; z != "use1-az6" {
		t.Fatalf("a reservation named by zone only is in %q, want the zone id use1-az6", z)
	}
	if od := offers[2]; od.Reservation != nil || od.PricePerHour != 98.32 {
		t.Fatalf("on-demand offers do not follow the reservations: %+v", od)
	}
	reqs := e.f.requests("DescribeCapacityReservations")
	var regions []string
	for _, r := range reqs {
		regions = append(regions, r.Region)
		fs := filters(r.Form)
		if !slices.Equal(fs["state"], []string{"active"}) || !slices.Equal(fs["instance-platform"], []string{"Linux/UNIX"}) ||
			!slices.Equal(fs["tenancy"], []string{"default"}) || !slices.Equal(fs["instance-type"], []string{"p5.48xlarge"}) {
			t.Fatalf("DescribeCapacityReservations filters %v", fs)
		}
	}
	slices.Sort(regions)
	if !slices.Equal(regions, []string{"us-east-1", "us-west-2"}) {
		t.Fatalf("DescribeCapacityReservations in %v, want once per configured region", regions)
	}

	// A request for reserved capacity only gets the reservations.
	only := plan(t, e, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reserved: provider.RequireReserved})
	if len(only) != 3 || len(reservationIDs(only)) != 3 {
		t.Fatalf("reserved-only plan: %+v", only)
	}
}

// A named reservation is planned alone, whatever its targeting: a
// targeted ODCR, a Capacity Block of a type the catalog prices nowhere
// (p5e: no list price, the catalog's shape).
func TestPlanNamedReservation(t *testing.T) {
	e := reservationsEnv(t)
	offers := plan(t, e, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crTargeted})
	if len(offers) != 1 || offers[0].Reservation == nil || !offers[0].Reservation.Targeted || offers[0].Location.Zone != "usw2-az1" {
		t.Fatalf("named targeted reservation: %+v", offers)
	}
	for _, r := range e.f.requests("DescribeCapacityReservations") {
		if ids := list(r.Form, "CapacityReservationId"); !slices.Equal(ids, []string{crTargeted}) || len(filters(r.Form)) != 0 {
			t.Fatalf("a named reservation is asked by id alone, got ids %v filters %v", ids, filters(r.Form))
		}
	}
	offers = plan(t, e, provider.ResourceRequest{GPU: "H200", GPUCount: 8, Reservation: crBlock})
	if len(offers) != 1 {
		t.Fatalf("named Capacity Block: %+v", offers)
	}
	b := offers[0]
	if b.InstanceType != "p5e.48xlarge" || b.PricePerHour != 0 || b.VCPUs != 192 || b.MemoryGB != 2048 || b.GPUMemoryGB != 141 ||
		!b.Reservation.Targeted || b.Reservation.Ends != t0.Add(47*time.Hour) || b.Reservation.Reclaims != 30*time.Minute {
		t.Fatalf("Capacity Block offer %+v (%+v)", b, b.Reservation)
	}
	if d := detail(t, b); d["capacity_block"] != true || d["price_source"] != "unknown" {
		t.Fatalf("Capacity Block detail %v", d)
	}
	// Unnamed, neither targeted reservation is planned; p5en's on-demand
	// offers are.
	for _, o := range plan(t, e, provider.ResourceRequest{GPU: "H200", GPUCount: 8}) {
		if o.Reservation != nil || o.InstanceType != "p5en.48xlarge" {
			t.Fatalf("unnamed H200 plan offered %+v", o)
		}
	}
}

// A named reservation that exists but cannot serve the request is an
// InvalidRequest naming it and what is wrong; one no region knows, or a
// name that is not a reservation id, is no offer and no error.
func TestPlanNamedReservationMismatch(t *testing.T) {
	for name, tc := range map[string]struct {
		req  provider.ResourceRequest
		want []string // in the error; nil: no error, no offers
	}{
		"other shape": {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crL4}, []string{crL4, "g6.xlarge", "1 × L4", "not 8 × H100-80GB"}},
		"other count": {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 4, Reservation: crOpen}, []string{crOpen, "not 4 × H100-80GB"}},
		"expired":     {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crExpired}, []string{crExpired, "is expired, not active"}},
		"ended":       {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crEnded}, []string{crEnded, "ended at"}},
		"windows":     {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crWindows}, []string{crWindows, `platform "Windows"`}},
		"region left out": {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crOpen, Regions: []string{"us-west-2"}},
			[]string{crOpen, "is in us-east-1, not in the request's regions (us-west-2)"}},
		"zone left out": {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crOpen, Zones: []string{"use1-az1"}},
			[]string{crOpen, "zone use1-az4"}},
		"spot only":   {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crOpen, Spot: provider.SpotOnly}, []string{crOpen, "not spot"}},
		"unknown id":  {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crUnknown}, nil},
		"another's":   {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "my-gcp-reservation"}, nil},
		"vcpus short": {provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crOpen, MinVCPUs: 256}, []string{crOpen, "192 vCPUs"}},
	} {
		t.Run(name, func(t *testing.T) {
			e := reservationsEnv(t)
			offers, err := e.p.Plan(context.Background(), &tc.req)
			if tc.want == nil {
				if err != nil || len(offers) != 0 {
					t.Fatalf("got %d offers, err %v; want none and no error", len(offers), err)
				}
				return
			}
			errKind(t, err, provider.InvalidRequest)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
			}
		})
	}
	e := reservationsEnv(t)
	plan(t, e, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: "my-gcp-reservation"})
	if n := len(e.f.requests("")); n != 0 {
		t.Fatalf("a name that is not a reservation id made %d calls", n)
	}
	plan(t, e, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crUnknown})
	if n := len(e.f.requests("DescribeCapacityReservations")); n != 2 {
		t.Fatalf("an unknown id was looked for in %d regions, want both", n)
	}
}

// Reservations never fail Plan: an account that may not describe them
// (UnauthorizedOperation) plans on-demand capacity; a request that
// forbids reservations makes no reservation call at all.
func TestPlanReservationsUnreadable(t *testing.T) {
	e := reservationsEnv(t)
	e.f.fail(&fakeRule{Action: "DescribeCapacityReservations", Code: "UnauthorizedOperation"})
	offers := plan(t, e, h100x8)
	if len(offers) == 0 || len(reservationIDs(offers)) != 0 {
		t.Fatalf("plan without reservation access: %+v", offers)
	}
	if offers, err := e.p.Plan(context.Background(), &provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crOpen}); err != nil || len(offers) != 0 {
		t.Fatalf("named reservation without access: %+v, %v", offers, err)
	}

	e = reservationsEnv(t)
	offers = plan(t, e, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reserved: provider.ForbidReserved})
	if len(offers) == 0 || len(reservationIDs(offers)) != 0 || len(e.f.requests("DescribeCapacityReservations")) != 0 {
		t.Fatalf("forbidding plan: %d offers, %v reservations, %d calls", len(offers), reservationIDs(offers),
			len(e.f.requests("DescribeCapacityReservations")))
	}
	if d := detail(t, offers[0]); d["no_reservation"] != true {
		t.Fatalf("forbidding plan's offer detail %v", d)
	}
}

func runForm(t *testing.T, e *env, i int) map[string]string {
	t.Helper()
	runs := e.f.requests("RunInstances")
	if len(runs) <= i {
		t.Fatalf("%d RunInstances, want more than %d", len(runs), i)
	}
	out := map[string]string{}
	for k, v := range runs[i].Form {
		if strings.HasPrefix(k, "CapacityReservationSpecification") || strings.HasPrefix(k, "InstanceMarketOptions") {
			out[k] = v[0]
		}
	}
	return out
}

// Create launches a reservation offer into its reservation by id; a full
// one is Unavailable (that offer alone), never Capacity.
func TestCreateIntoReservation(t *testing.T) {
	e := reservationsEnv(t)
	ctx := context.Background()
	o := e.offer(t, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crOpen})
	spec := newSpec(t, "res-1")
	prep, err := e.p.Prepare(ctx, &o, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Create(ctx, &o, prep, spec); err != nil {
		t.Fatalf("create into %s: %v", crOpen, err)
	}
	if got := runForm(t, e, 0); len(got) != 1 || got["CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"] != crOpen {
		t.Fatalf("RunInstances reservation parameters %v", got)
	}
	if c := e.f.reservation(crOpen); c.Free != 0 {
		t.Fatalf("the launch did not land in %s (%d free)", crOpen, c.Free)
	}

	// It is full now: EC2 answers ReservationCapacityExceeded.
	spec2 := newSpec(t, "res-2")
	prep2, err := e.p.Prepare(ctx, &o, spec2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Create(ctx, &o, prep2, spec2)
	pe := errKind(t, err, provider.Unavailable)
	if pe.Scope() != provider.ScopeOffer || errors.Is(err, provider.Capacity) || !strings.Contains(err.Error(), crOpen) ||
		!strings.Contains(err.Error(), "ReservationCapacityExceeded") {
		t.Fatalf("full reservation: %v (scope %s)", err, pe.Scope())
	}

	// A stockout inside a reservation reads the same: the reservation
	// cannot take it, the zone's on-demand offers are not blocked.
	e.f.fail(&fakeRule{Action: "RunInstances", Code: "InsufficientInstanceCapacity", Times: 1})
	o2 := e.offer(t, provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Reservation: crTargeted})
	spec3 := newSpec(t, "res-3")
	prep3, err := e.p.Prepare(ctx, &o2, spec3)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Create(ctx, &o2, prep3, spec3)
	if pe := errKind(t, err, provider.Unavailable); pe.Scope() != provider.ScopeOffer {
		t.Fatalf("stockout in a reservation: scope %s", pe.Scope())
	}
}

// A Capacity Block is launched on the capacity-block market, by id.
func TestCreateIntoCapacityBlock(t *testing.T) {
	e := reservationsEnv(t)
	o, _ := e.launch(t, provider.ResourceRequest{GPU: "H200", GPUCount: 8, Reservation: crBlock}, newSpec(t, "block-1"))
	got := runForm(t, e, 0)
	if got["CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"] != crBlock ||
		got["InstanceMarketOptions.MarketType"] != "capacity-block" || o.InstanceType != "p5e.48xlarge" {
		t.Fatalf("RunInstances into a Capacity Block: %v", got)
	}
}

// An on-demand create leaves EC2's default (open: a matching open
// reservation is used); a request that forbids reservations sends
// CapacityReservationPreference none, so the open reservation in the zone
// keeps its slot. Spot launches never send it.
func TestCreateReservationPreference(t *testing.T) {
	inZone := provider.ResourceRequest{GPU: "L4", GPUCount: 1, Zones: []string{"use1-az1"}, Regions: []string{"us-east-1"}}

	e := reservationsEnv(t)
	forbid := inZone
	forbid.Reserved = provider.ForbidReserved
	e.launch(t, forbid, newSpec(t, "od-1"))
	if got := runForm(t, e, 0); len(got) != 1 || got["CapacityReservationSpecification.CapacityReservationPreference"] != "none" {
		t.Fatalf("forbidding create: %v", got)
	}
	if c := e.f.reservation(crL4); c.Free != 1 {
		t.Fatalf("a forbidding create took a slot of the open reservation %s", crL4)
	}

	e = reservationsEnv(t)
	var od provider.Offer
	for _, o := range plan(t, e, inZone) {
		if o.Reservation == nil {
			od = o
			break
		}
	}
	spec := newSpec(t, "od-2")
	prep, err := e.p.Prepare(context.Background(), &od, spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Create(context.Background(), &od, prep, spec); err != nil {
		t.Fatal(err)
	}
	if got := runForm(t, e, 0); len(got) != 0 {
		t.Fatalf("a default on-demand create sent %v", got)
	}
	if c := e.f.reservation(crL4); c.Free != 0 {
		t.Fatal("the fake did not apply EC2's default (open) preference")
	}

	cfg := awsConfig()
	cfg.Spot = true
	e = newEnv(t, cfg)
	spot := inZone
	spot.Spot, spot.Reserved = provider.SpotOnly, provider.ForbidReserved
	e.launch(t, spot, newSpec(t, "spot-1"))
	if got := runForm(t, e, 0); got["InstanceMarketOptions.MarketType"] != "spot" || len(got) != 3 {
		t.Fatalf("a forbidding spot create: %v", got)
	}
}
