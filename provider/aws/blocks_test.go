package aws_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/org/gpuprov/provider"
)

// The Capacity Block tests run the adapter against the fake EC2, whose
// DescribeCapacityBlockOfferings, PurchaseCapacityBlock and
// DescribeCapacityReservations follow the EC2 API Reference's request
// parameters and response elements (CapacityBlockOffering,
// CapacityReservation) and the element names aws-sdk-go-v2's ec2
// deserializer reads; the requests are asserted in the wire form the SDK's
// serializer writes (CapacityDurationHours, InstanceCount,
// StartDateRange, TagSpecification.1.ResourceType, …). moto 5.2.1
// implements none of these three calls for Capacity Blocks (no
// DescribeCapacityBlockOfferings, no PurchaseCapacityBlock, no
// capacity reservations at all), so nothing here runs against moto.

const (
	cbEast    = "cb-0000000000000e001" // us-east-1 use1-az4, p5 × 2, 2 days from t0+24h, $15,000.50
	cbWest    = "cb-0000000000000e002" // us-west-2 usw2-az3, p5 × 2, 2 days from t0+48h, $14,000
	cbOne     = "cb-0000000000000e003" // us-east-1, p5 × 1: another count
	cbEuro    = "cb-0000000000000e004" // us-east-1, p5 × 2, priced in EUR
	cbDedic   = "cb-0000000000000e005" // us-east-1, p5 × 2, dedicated tenancy
	cbH200    = "cb-0000000000000e006" // us-east-1, p5en × 2: another GPU
	cbShort   = "cb-0000000000000e007" // us-west-2 usw2-az1, p5 × 2, 40 h ending t0+120h: starts after a 3-day bound
	cbUnknown = "cb-00000000000000fff"
)

func blocksEnv(t *testing.T) *env {
	e := newEnv(t, awsConfig())
	day := 24 * time.Hour
	for _, o := range []fakeOffering{
		{ID: cbEast, Region: "us-east-1", ZoneID: "use1-az4", Type: "p5.48xlarge", Count: 2, Start: t0.Add(day), End: t0.Add(3 * day), Fee: "15000.50"},
		{ID: cbWest, Region: "us-west-2", ZoneID: "usw2-az3", Type: "p5.48xlarge", Count: 2, Start: t0.Add(2 * day), End: t0.Add(4 * day), Fee: "14000"},
		{ID: cbOne, Region: "us-east-1", ZoneID: "use1-az4", Type: "p5.48xlarge", Count: 1, Start: t0.Add(day), End: t0.Add(3 * day), Fee: "7500"},
		{ID: cbEuro, Region: "us-east-1", ZoneID: "use1-az2", Type: "p5.48xlarge", Count: 2, Start: t0.Add(day), End: t0.Add(3 * day), Fee: "13000", Currency: "EUR"},
		{ID: cbDedic, Region: "us-east-1", ZoneID: "use1-az2", Type: "p5.48xlarge", Count: 2, Start: t0.Add(day), End: t0.Add(3 * day), Fee: "13000", Tenancy: "dedicated"},
		{ID: cbH200, Region: "us-east-1", ZoneID: "use1-az2", Type: "p5en.48xlarge", Count: 2, Start: t0.Add(day), End: t0.Add(3 * day), Fee: "100"},
		{ID: cbShort, Region: "us-west-2", ZoneID: "usw2-az1", Type: "p5.48xlarge", Count: 2, Start: t0.Add(80 * time.Hour), End: t0.Add(5 * day), Fee: "9000"},
	} {
		e.f.addOffering(o)
	}
	return e
}

var h100Block = provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Block: &provider.BlockQuery{Count: 2, Duration: 48 * time.Hour}}

func blockOfferings(t *testing.T, e *env, req provider.ResourceRequest) []provider.Offer {
	t.Helper()
	offers, err := e.p.BlockOfferings(context.Background(), &req, *req.Block)
	if err != nil {
		t.Fatalf("BlockOfferings: %v", err)
	}
	return offers
}

func offeringIDs(offers []provider.Offer) []string {
	var ids []string
	for _, o := range offers {
		ids = append(ids, o.Block.Offering)
	}
	return ids
}

// One DescribeCapacityBlockOfferings per planned region and Capacity Block
// type of the request's GPU (p5.48xlarge for 8 × H100), for the duration
// in hours and the count, from now; each answer in USD and default
// tenancy becomes an offer in its zone id, at p5's list price, with the
// block's window, count and upfront fee, cheapest fee first.
func TestBlockOfferings(t *testing.T) {
	e := blocksEnv(t)
	offers := blockOfferings(t, e, h100Block)
	// cbShort (40 h) is EC2's "slightly less than your desired duration".
	if got, want := strings.Join(offeringIDs(offers), ","), cbShort+","+cbWest+","+cbEast; got != want {
		t.Fatalf("offerings %s, want %s (the count-1, EUR, dedicated and H200 ones left out)", got, want)
	}
	east := offers[2]
	wantBlock := provider.Block{Offering: cbEast, Count: 2, Start: t0.Add(24 * time.Hour), End: t0.Add(72 * time.Hour), UpfrontFee: 15000.50}
	if *east.Block != wantBlock {
		t.Fatalf("block %+v, want %+v", *east.Block, wantBlock)
	}
	if east.Location != (provider.Location{Region: "us-east-1", Zone: "use1-az4"}) || east.InstanceType != "p5.48xlarge" ||
		east.GPU != "H100-80GB" || east.GPUCount != 8 || east.VCPUs != 192 || east.PricePerHour != 98.32 || east.Spot ||
		east.Reservation != nil || east.Family != "P" || east.Provider != "aws" {
		t.Fatalf("offer %+v", east)
	}
	if d := detail(t, east); d["block_offering"] != cbEast || d["instance_type"] != "p5.48xlarge" || d["zone_id"] != "use1-az4" ||
		d["platform"] != "Linux/UNIX" || d["reservation"] != nil {
		t.Fatalf("detail %v", d)
	}
	if !strings.Contains(east.Key(), "|block:"+cbEast) || !h100Block.Accepts(&east) {
		t.Fatalf("key %s; accepted by the request: %v", east.Key(), h100Block.Accepts(&east))
	}
	reqs := e.f.requests("DescribeCapacityBlockOfferings")
	if len(reqs) != 2 || reqs[0].Region != "us-east-1" || reqs[1].Region != "us-west-2" {
		t.Fatalf("%d DescribeCapacityBlockOfferings, want one per region", len(reqs))
	}
	for _, r := range reqs {
		for k, want := range map[string]string{"CapacityDurationHours": "48", "InstanceCount": "2", "InstanceType": "p5.48xlarge",
			"StartDateRange": "2026-03-01T12:00:00Z", "EndDateRange": ""} {
			if got := r.Form.Get(k); got != want {
				t.Errorf("%s %s=%q, want %q", r.Region, k, got, want)
			}
		}
	}
	// The zone names of the answers are mapped once per region.
	if n := len(e.f.requests("DescribeAvailabilityZones")); n != 2 {
		t.Errorf("%d DescribeAvailabilityZones, want 2", n)
	}
}

// StartBefore bounds the window: EndDateRange is StartBefore plus the
// duration, and an offering EC2 returns that starts after StartBefore (a
// slightly shorter block ending by that bound) is left out. Zones and
// regions of the request narrow the offers.
func TestBlockOfferingsWindowAndPlace(t *testing.T) {
	e := blocksEnv(t)
	req := h100Block
	req.Block = &provider.BlockQuery{Count: 2, Duration: 48 * time.Hour, StartBefore: t0.Add(72 * time.Hour)}
	offers := blockOfferings(t, e, req)
	if got := strings.Join(offeringIDs(offers), ","); got != cbWest+","+cbEast {
		t.Fatalf("offerings %s, want %s,%s (not %s, which starts 8 h after the bound)", got, cbWest, cbEast, cbShort)
	}
	for _, r := range e.f.requests("DescribeCapacityBlockOfferings") {
		if got := r.Form.Get("EndDateRange"); got != "2026-03-06T12:00:00Z" {
			t.Fatalf("EndDateRange %q, want StartBefore + 48 h", got)
		}
	}

	req.Zones = []string{"usw2-az3"}
	if got := offeringIDs(blockOfferings(t, e, req)); len(got) != 1 || got[0] != cbWest {
		t.Fatalf("with zone usw2-az3: %v", got)
	}
	e2 := blocksEnv(t)
	req = h100Block
	req.Regions = []string{"us-east-1"}
	if got := offeringIDs(blockOfferings(t, e2, req)); len(got) != 1 || got[0] != cbEast {
		t.Fatalf("in us-east-1: %v", got)
	}
	if reqs := e2.f.requests("DescribeCapacityBlockOfferings"); len(reqs) != 1 || reqs[0].Region != "us-east-1" {
		t.Fatalf("a region the request leaves out was asked")
	}

	// A GPU no Capacity Block type carries: no call at all.
	e3 := blocksEnv(t)
	l4Block := provider.ResourceRequest{GPU: "L4", GPUCount: 1, Block: &provider.BlockQuery{Count: 1, Duration: 24 * time.Hour}}
	if offers := blockOfferings(t, e3, l4Block); len(offers) != 0 || len(e3.f.requests("")) != 0 {
		t.Fatalf("L4 block: %d offers, %d requests", len(offers), len(e3.f.requests("")))
	}
}

// A duration or count EC2 does not sell is an InvalidRequest naming the
// bound, before any call.
func TestBlockOfferingsRefusesWhatEC2DoesNotSell(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		q    provider.BlockQuery
		want string // "" accepted
	}{
		{provider.BlockQuery{Count: 1, Duration: day}, ""},
		{provider.BlockQuery{Duration: 14 * day}, ""}, // count 0 means 1
		{provider.BlockQuery{Count: 64, Duration: 21 * day}, ""},
		{provider.BlockQuery{Count: 1, Duration: 182 * day}, ""},
		{provider.BlockQuery{Count: 1, Duration: 0}, "whole days"},
		{provider.BlockQuery{Count: 1, Duration: 36 * time.Hour}, "whole days"},
		{provider.BlockQuery{Count: 1, Duration: 15 * day}, "whole number of weeks"},
		{provider.BlockQuery{Count: 1, Duration: 189 * day}, "at most 182 days"},
		{provider.BlockQuery{Count: 65, Duration: day}, "1 to 64 instances"},
		{provider.BlockQuery{Count: -1, Duration: day}, "1 to 64 instances"},
		{provider.BlockQuery{Count: 1, Duration: day, StartBefore: t0.Add(-time.Minute)}, "has passed"},
	} {
		e := newEnv(t, awsConfig())
		req := provider.ResourceRequest{GPU: "H100-80GB", GPUCount: 8, Block: &tc.q}
		_, err := e.p.BlockOfferings(context.Background(), &req, tc.q)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.q, err)
			}
			if r := e.f.requests("DescribeCapacityBlockOfferings"); len(r) == 0 ||
				r[0].Form.Get("CapacityDurationHours") != strconv.Itoa(int(tc.q.Duration/time.Hour)) || r[0].Form.Get("InstanceCount") != strconv.Itoa(max(tc.q.Count, 1)) {
				t.Errorf("%+v: requests %v", tc.q, r)
			}
			continue
		}
		pe := errKind(t, err, provider.InvalidRequest)
		if !strings.Contains(pe.Error(), tc.want) {
			t.Errorf("%+v: %v, want it to say %q", tc.q, err, tc.want)
		}
		if n := len(e.f.requests("")); n != 0 {
			t.Errorf("%+v: %d requests sent for a refused query", tc.q, n)
		}
	}
}

// A region whose offerings cannot be read is left out; when no region
// could be read, the error is returned (the core then says why rather than
// "none on sale").
func TestBlockOfferingsErrors(t *testing.T) {
	e := blocksEnv(t)
	e.f.fail(&fakeRule{Action: "DescribeCapacityBlockOfferings", Code: "UnauthorizedOperation", Match: func(r *fakeReq) bool { return r.Region == "us-west-2" }})
	if got := offeringIDs(blockOfferings(t, e, h100Block)); len(got) != 1 || got[0] != cbEast {
		t.Fatalf("with us-west-2 denied: %v, want us-east-1's offering", got)
	}
	e = blocksEnv(t)
	e.f.fail(&fakeRule{Action: "DescribeCapacityBlockOfferings", Code: "UnauthorizedOperation"})
	_, err := e.p.BlockOfferings(context.Background(), &h100Block, *h100Block.Block)
	errKind(t, err, provider.Credentials)
	e = blocksEnv(t)
	e.f.fail(&fakeRule{Action: "DescribeCapacityBlockOfferings", Code: "RequestLimitExceeded"})
	_, err = e.p.BlockOfferings(context.Background(), &h100Block, *h100Block.Block)
	errKind(t, err, provider.Transient)
}

func blockSpec(t *testing.T, vm string, attempt int) *provider.InstanceSpec {
	spec := newSpec(t, vm)
	spec.Attempt = attempt
	spec.UserLabels = map[string]string{"team": "ml"}
	return spec
}

func offerOf(t *testing.T, offers []provider.Offer, id string) provider.Offer {
	t.Helper()
	for _, o := range offers {
		if o.Block.Offering == id {
			return o
		}
	}
	t.Fatalf("no offer of %s in %v", id, offeringIDs(offers))
	return provider.Offer{}
}

// PurchaseBlock sends PurchaseCapacityBlock for Linux/UNIX with the VM's
// tags and the attempt's on the capacity reservation, and returns the offer
// that launches into the block: targeted, its count free, its end, reclaimed
// 30 minutes before it. Create on that offer, once the block has started,
// launches into the reservation on the capacity-block market.
func TestPurchaseBlockThenLaunch(t *testing.T) {
	e := blocksEnv(t)
	ctx := context.Background()
	offer := offerOf(t, blockOfferings(t, e, h100Block), cbEast)
	spec := blockSpec(t, "train", 3)
	got, err := e.p.PurchaseBlock(ctx, &offer, spec)
	if err != nil {
		t.Fatal(err)
	}
	reqs := e.f.requests("PurchaseCapacityBlock")
	if len(reqs) != 1 {
		t.Fatalf("%d PurchaseCapacityBlock", len(reqs))
	}
	f := reqs[0].Form
	if f.Get("CapacityBlockOfferingId") != cbEast || f.Get("InstancePlatform") != "Linux/UNIX" || reqs[0].Region != "us-east-1" ||
		f.Get("TagSpecification.1.ResourceType") != "capacity-reservation" || f.Get("TagSpecification.2.ResourceType") != "" {
		t.Fatalf("PurchaseCapacityBlock form %v", f)
	}
	tags := tagSpec(f, "capacity-reservation")
	for k, v := range map[string]string{"gpuprov": "train", "gpuprov-installation": installation, "gpuprov-attempt": "3",
		"team": "ml", "Name": "gpuprov-train"} {
		if tags[k] != v {
			t.Errorf("tag %s=%q, want %q (tags %v)", k, tags[k], v, tags)
		}
	}
	cr := e.f.lastReservation()
	want := provider.Reservation{ID: cr, Targeted: true, Total: 2, Free: 2, Ends: t0.Add(72 * time.Hour), Reclaims: 30 * time.Minute}
	if got.Reservation == nil || *got.Reservation != want {
		t.Fatalf("reservation %+v, want %+v", got.Reservation, want)
	}
	if *got.Block != *offer.Block || got.Location != offer.Location || got.InstanceType != offer.InstanceType || got.MarginalPrice() != 0 {
		t.Fatalf("bought offer %+v, from %+v", got, offer)
	}
	if d := detail(t, got); d["reservation"] != cr || d["capacity_block"] != true || d["zone_id"] != "use1-az4" {
		t.Fatalf("detail %v", d)
	}
	if !strings.Contains(got.Key(), "|res:"+cr) || !strings.Contains(got.Key(), "|block:"+cbEast) {
		t.Fatalf("key %s", got.Key())
	}

	// Before its start the block does not take the launch (Unavailable,
	// this offer only); at its start it does.
	prep, err := e.p.Prepare(ctx, &got, spec)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.Create(ctx, &got, prep, spec)
	errKind(t, err, provider.Unavailable)
	e.clk.Advance(24 * time.Hour)
	id, err := e.p.Create(ctx, &got, prep, spec)
	if err != nil {
		t.Fatalf("create at the block's start: %v", err)
	}
	runs := e.f.requests("RunInstances")
	rf := runs[len(runs)-1].Form
	if rf.Get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId") != cr ||
		rf.Get("InstanceMarketOptions.MarketType") != "capacity-block" || rf.Get("InstanceType") != "p5.48xlarge" {
		t.Fatalf("RunInstances form %v", rf)
	}
	if live := e.f.live(); len(live) != 1 || live[0].ID != id || e.f.reservation(cr).Free != 1 {
		t.Fatalf("instance %s not in the block: live %v", id, live)
	}
}

// An offering sold since it was planned is Capacity (the offer alone is
// blocked); a server error is Transient; an offer that is not a block, or
// is bought already, is refused before anything is sent.
func TestPurchaseBlockErrors(t *testing.T) {
	e := blocksEnv(t)
	ctx := context.Background()
	offers := blockOfferings(t, e, h100Block)
	east := offerOf(t, offers, cbEast)
	if _, err := e.p.PurchaseBlock(ctx, &east, blockSpec(t, "a", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.PurchaseBlock(ctx, &east, blockSpec(t, "b", 1))
	pe := errKind(t, err, provider.Capacity)
	if pe.Scope() != provider.ScopeOffer || !strings.Contains(err.Error(), "InvalidCapacityBlockOfferingIdExpired") {
		t.Fatalf("sold offering: scope %s, %v", pe.Scope(), err)
	}
	unknown := east
	unknown.Block = &provider.Block{Offering: cbUnknown}
	unknown.Detail = []byte(strings.Replace(string(east.Detail), cbEast, cbUnknown, 1))
	_, err = e.p.PurchaseBlock(ctx, &unknown, blockSpec(t, "c", 1))
	errKind(t, err, provider.Capacity)

	west := offerOf(t, offers, cbWest)
	e.f.fail(&fakeRule{Action: "PurchaseCapacityBlock", Code: "ServiceUnavailable", Times: 1})
	_, err = e.p.PurchaseBlock(ctx, &west, blockSpec(t, "d", 1))
	errKind(t, err, provider.Transient)

	sent := len(e.f.requests("PurchaseCapacityBlock"))
	bought, err := e.p.PurchaseBlock(ctx, &west, blockSpec(t, "d", 2))
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.p.PurchaseBlock(ctx, &bought, blockSpec(t, "d", 2))
	if errKind(t, err, provider.InvalidRequest); !strings.Contains(err.Error(), "already bought as "+bought.Reservation.ID) {
		t.Fatalf("rebuying: %v", err)
	}
	plain := e.offer(t, l4)
	_, err = e.p.PurchaseBlock(ctx, &plain, blockSpec(t, "e", 1))
	if errKind(t, err, provider.InvalidRequest); !strings.Contains(err.Error(), "not an AWS Capacity Block offering") {
		t.Fatalf("plain offer: %v", err)
	}
	noAttempt := blockSpec(t, "f", 0)
	_, err = e.p.PurchaseBlock(ctx, &west, noAttempt)
	errKind(t, err, provider.InvalidRequest)
	if n := len(e.f.requests("PurchaseCapacityBlock")); n != sent+1 {
		t.Fatalf("%d purchases sent, want only the one that bought", n-sent)
	}
}

// A purchase whose answer is lost (bought, then an HTTP 500) is Transient;
// FindBlock then finds the block by the VM's, installation's and
// attempt's tags and returns what PurchaseBlock would have; another
// attempt, VM or installation finds nothing; a block whose payment failed
// is not returned; an error reading reservations is returned, not read as
// "none".
func TestFindBlock(t *testing.T) {
	e := blocksEnv(t)
	ctx := context.Background()
	offers := blockOfferings(t, e, h100Block)
	east := offerOf(t, offers, cbEast)
	spec := blockSpec(t, "train", 2)
	if found, err := e.p.FindBlock(ctx, &east, spec); err != nil || found != nil {
		t.Fatalf("before any purchase: %+v, %v", found, err)
	}
	e.f.losePurchases = 1
	_, err := e.p.PurchaseBlock(ctx, &east, spec)
	errKind(t, err, provider.Transient)
	found, err := e.p.FindBlock(ctx, &east, spec)
	if err != nil || found == nil {
		t.Fatalf("after a lost answer: %+v, %v", found, err)
	}
	cr := e.f.lastReservation()
	want := provider.Reservation{ID: cr, Targeted: true, Total: 2, Free: 2, Ends: t0.Add(72 * time.Hour), Reclaims: 30 * time.Minute}
	if *found.Reservation != want || *found.Block != *east.Block || found.Location != east.Location {
		t.Fatalf("found %+v (%+v)", found, found.Reservation)
	}
	if d := detail(t, *found); d["reservation"] != cr || d["capacity_block"] != true {
		t.Fatalf("detail %v", d)
	}
	reqs := e.f.requests("DescribeCapacityReservations")
	fs := filters(reqs[len(reqs)-1].Form)
	if reqs[len(reqs)-1].Region != "us-east-1" || fs["tag:gpuprov"][0] != "train" || fs["tag:gpuprov-installation"][0] != installation ||
		fs["tag:gpuprov-attempt"][0] != "2" {
		t.Fatalf("DescribeCapacityReservations in %s with %v", reqs[len(reqs)-1].Region, fs)
	}
	// The block found launches as the one bought would: same detail.
	west := offerOf(t, offers, cbWest)
	other := blockSpec(t, "train", 3)
	boughtWest, err := e.p.PurchaseBlock(ctx, &west, other)
	if err != nil {
		t.Fatal(err)
	}
	foundWest, err := e.p.FindBlock(ctx, &west, other)
	if err != nil || foundWest == nil || string(foundWest.Detail) != string(boughtWest.Detail) || *foundWest.Reservation != *boughtWest.Reservation {
		t.Fatalf("FindBlock %+v, PurchaseBlock %+v (%v)", foundWest, boughtWest, err)
	}

	for _, s := range []*provider.InstanceSpec{blockSpec(t, "train", 1), blockSpec(t, "eval", 2)} {
		if got, err := e.p.FindBlock(ctx, &east, s); err != nil || got != nil {
			t.Fatalf("%s attempt %d: %+v, %v", s.VM, s.Attempt, got, err)
		}
	}
	e.f.setReservationState(cr, "payment-failed")
	if got, err := e.p.FindBlock(ctx, &east, spec); err != nil || got != nil {
		t.Fatalf("payment failed: %+v, %v", got, err)
	}
	e.f.fail(&fakeRule{Action: "DescribeCapacityReservations", Code: "UnauthorizedOperation"})
	got, err := e.p.FindBlock(ctx, &west, other)
	if errKind(t, err, provider.Credentials); got != nil {
		t.Fatalf("an unreadable answer read as %+v", got)
	}
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Op != "purchase" {
		t.Fatalf("op %v", err)
	}
}
