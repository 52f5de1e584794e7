package aws_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// fakeOffering is a Capacity Block offering as the EC2 API Reference's
// CapacityBlockOffering data type describes it; DescribeCapacityBlockOfferings
// answers capacityBlockOfferingSet/item with the element names aws-sdk-go-v2's
// ec2 deserializer reads (capacityBlockOfferingId, instanceType,
// availabilityZone, instanceCount, startDate, endDate,
// capacityBlockDurationHours, capacityBlockDurationMinutes, upfrontFee,
// currencyCode, tenancy).
type fakeOffering struct {
	ID, Region, ZoneID, Type string
	Count                    int
	Start, End               time.Time
	Fee                      string // upfrontFee as EC2 writes it: "12345.67"
	Currency                 string // default USD
	Tenancy                  string // default "default"
	sold                     bool
}

// addOffering puts a Capacity Block offering on sale in the fake.
func (f *fakeEC2) addOffering(o fakeOffering) {
	if o.Currency == "" {
		o.Currency = "USD"
	}
	if o.Tenancy == "" {
		o.Tenancy = "default"
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blocks = append(f.blocks, &o)
}

// capacityBlockOfferings answers DescribeCapacityBlockOfferings as the
// EC2 User Guide ("Find and purchase Capacity Blocks") describes the
// search: offerings of InstanceType and InstanceCount in the region,
// starting no earlier than StartDateRange and ending no later than
// EndDateRange, whose duration is the closest match to
// CapacityDurationHours ("one block will have a duration that is slightly
// less than your desired duration, while the other will have a duration
// slightly greater"; the fake takes anything within a day). A bought
// offering is no longer listed. CapacityDurationHours and InstanceCount are
// required, as the reference says.
func (f *fakeEC2) capacityBlockOfferings(r *fakeReq) *http.Response {
	hours, herr := strconv.Atoi(r.Form.Get("CapacityDurationHours"))
	if herr != nil {
		return ec2Error(400, "MissingParameter", "The request must contain the parameter CapacityDurationHours")
	}
	count, _ := strconv.Atoi(r.Form.Get("InstanceCount"))
	from, _ := time.Parse(time.RFC3339, r.Form.Get("StartDateRange"))
	until, _ := time.Parse(time.RFC3339, r.Form.Get("EndDateRange"))
	var b strings.Builder
	b.WriteString(`<capacityBlockOfferingSet>`)
	for _, o := range f.blocks {
		d := o.End.Sub(o.Start)
		if o.sold || o.Region != r.Region || o.Type != r.Form.Get("InstanceType") || o.Count != count ||
			math.Abs(d.Hours()-float64(hours)) >= 24 || o.Start.Before(from) || (!until.IsZero() && o.End.After(until)) {
			continue
		}
		fmt.Fprintf(&b, `<item><capacityBlockOfferingId>%s</capacityBlockOfferingId><instanceType>%s</instanceType>`+
			`<availabilityZone>%s</availabilityZone><instanceCount>%d</instanceCount><startDate>%s</startDate><endDate>%s</endDate>`+
			`<capacityBlockDurationHours>%d</capacityBlockDurationHours><capacityBlockDurationMinutes>%d</capacityBlockDurationMinutes>`+
			`<upfrontFee>%s</upfrontFee><currencyCode>%s</currencyCode><tenancy>%s</tenancy></item>`,
			o.ID, o.Type, zoneName(o.ZoneID), o.Count, o.Start.UTC().Format(time.RFC3339), o.End.UTC().Format(time.RFC3339),
			int(d.Hours()), int(d.Minutes())%60, o.Fee, o.Currency, o.Tenancy)
	}
	b.WriteString(`</capacityBlockOfferingSet>`)
	return answer("DescribeCapacityBlockOfferings", b.String())
}

// purchaseCapacityBlock answers PurchaseCapacityBlock: the offering
// becomes a targeted capacity reservation of ReservationType
// capacity-block in its zone, tagged with the request's TagSpecification
// of resource type capacity-reservation, scheduled until its start
// (tickReservations makes it active then), and the answer carries it as
// capacityReservation. An offering that was bought already is
// InvalidCapacityBlockOfferingIdExpired, one the region does not know
// InvalidCapacityBlockOfferingIdNotFound (the reference's client table).
func (f *fakeEC2) purchaseCapacityBlock(r *fakeReq) *http.Response {
	id := r.Form.Get("CapacityBlockOfferingId")
	if r.Form.Get("InstancePlatform") == "" {
		return ec2Error(400, "MissingParameter", "The request must contain the parameter InstancePlatform")
	}
	for _, o := range f.blocks {
		if o.ID != id || o.Region != r.Region {
			continue
		}
		if o.sold {
			return ec2Error(400, "InvalidCapacityBlockOfferingIdExpired", "The Capacity Block offering ID is no longer available.")
		}
		o.sold = true
		state := "scheduled"
		if !f.clk.Now().Before(o.Start) {
			state = "active"
		}
		c := &fakeCR{ID: f.newID("cr"), Region: o.Region, ZoneID: o.ZoneID, Type: o.Type, Platform: r.Form.Get("InstancePlatform"),
			Tenancy: o.Tenancy, State: state, Criteria: "targeted", ResType: "capacity-block", Total: o.Count, Free: o.Count,
			Start: o.Start, End: o.End, Tags: tagSpec(r.Form, "capacity-reservation")}
		f.crs = append(f.crs, c)
		if f.losePurchases > 0 {
			f.losePurchases--
			return ec2Error(500, "InternalError", "An internal error has occurred.")
		}
		return answer("PurchaseCapacityBlock", `<capacityReservation>`+c.fields()+`</capacityReservation><capacityBlockSet/>`)
	}
	return ec2Error(400, "InvalidCapacityBlockOfferingIdNotFound", "The Capacity Block offering ID cannot be found for this account.")
}

// tickReservations starts the Capacity Blocks whose start has come.
// Callers hold f.mu.
func (f *fakeEC2) tickReservations() {
	for _, c := range f.crs {
		if c.ResType == "capacity-block" && c.State == "scheduled" && !f.clk.Now().Before(c.Start) {
			c.State = "active"
		}
	}
}

// setReservationState forces a reservation's state (a failed payment).
func (f *fakeEC2) setReservationState(id, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.crs {
		if c.ID == id {
			c.State = state
		}
	}
}

// lastReservation returns the id of the reservation made last.
func (f *fakeEC2) lastReservation() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crs[len(f.crs)-1].ID
}
