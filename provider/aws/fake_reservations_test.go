package aws_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jarcoal/httpmock"
)

// fakeCR is a capacity reservation as the EC2 API Reference's
// CapacityReservation data type describes it (DescribeCapacityReservations
// answers capacityReservationSet/item with these fields, the element names
// aws-sdk-go-v2's ec2 deserializer reads: capacityReservationId,
// instanceType, instancePlatform, availabilityZone, availabilityZoneId,
// tenancy, totalInstanceCount, availableInstanceCount, state, startDate,
// endDate, instanceMatchCriteria, reservationType).
type fakeCR struct {
	ID, Region, ZoneID, Type string
	Platform                 string // default Linux/UNIX
	Tenancy                  string // default "default"
	State                    string // default active
	Criteria                 string // open | targeted; default open
	ResType                  string // default | capacity-block; default "default"
	Total, Free              int
	Start, End               time.Time
	NoZoneID                 bool              // answer the zone name only
	Tags                     map[string]string // tagSet; a bought Capacity Block's TagSpecification
}

func (c *fakeCR) defaults() {
	for p, d := range map[*string]string{&c.Platform: "Linux/UNIX", &c.Tenancy: "default", &c.State: "active",
		&c.Criteria: "open", &c.ResType: "default"} {
		if *p == "" {
			*p = d
		}
	}
}

// addReservation adds a capacity reservation to the fake.
func (f *fakeEC2) addReservation(c fakeCR) {
	c.defaults()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.crs = append(f.crs, &c)
}

func (f *fakeEC2) reservation(id string) *fakeCR {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.crs {
		if c.ID == id {
			cp := *c
			return &cp
		}
	}
	return nil
}

// capacityReservations answers DescribeCapacityReservations: the region's
// reservations, by CapacityReservationId.N (an unknown one is
// InvalidCapacityReservationId.NotFound, as EC2 answers) and by the
// state, instance-platform, tenancy and instance-type filters.
func (f *fakeEC2) capacityReservations(r *fakeReq) *http.Response {
	ids := list(r.Form, "CapacityReservationId")
	fs := filters(r.Form)
	var b strings.Builder
	b.WriteString(`<capacityReservationSet>`)
	found := map[string]bool{}
	for _, c := range f.crs {
		if c.Region != r.Region || (len(ids) > 0 && !slices.Contains(ids, c.ID)) {
			continue
		}
		if !filterOK(fs, "state", c.State) || !filterOK(fs, "instance-platform", c.Platform) ||
			!filterOK(fs, "tenancy", c.Tenancy) || !filterOK(fs, "instance-type", c.Type) || !matchTags(fs, c.Tags) {
			continue
		}
		found[c.ID] = true
		b.WriteString(c.xml())
	}
	b.WriteString(`</capacityReservationSet>`)
	for _, id := range ids {
		if !found[id] {
			return ec2Error(400, "InvalidCapacityReservationId.NotFound", "The capacity reservation ID '"+id+"' does not exist")
		}
	}
	return answer("DescribeCapacityReservations", b.String())
}

func filterOK(fs map[string][]string, name, v string) bool {
	vals, ok := fs[name]
	return !ok || slices.Contains(vals, v)
}

func (c *fakeCR) xml() string { return `<item>` + c.fields() + `</item>` }

// fields are the CapacityReservation's elements, as an item of
// capacityReservationSet or inside PurchaseCapacityBlock's
// capacityReservation.
func (c *fakeCR) fields() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<capacityReservationId>%s</capacityReservationId><instanceType>%s</instanceType>`+
		`<instancePlatform>%s</instancePlatform><availabilityZone>%s</availabilityZone>`, c.ID, c.Type, esc(c.Platform), zoneName(c.ZoneID))
	if !c.NoZoneID {
		fmt.Fprintf(&b, `<availabilityZoneId>%s</availabilityZoneId>`, c.ZoneID)
	}
	fmt.Fprintf(&b, `<tenancy>%s</tenancy><totalInstanceCount>%d</totalInstanceCount><availableInstanceCount>%d</availableInstanceCount>`+
		`<state>%s</state><instanceMatchCriteria>%s</instanceMatchCriteria><reservationType>%s</reservationType>`,
		c.Tenancy, c.Total, c.Free, c.State, c.Criteria, c.ResType)
	if !c.Start.IsZero() {
		fmt.Fprintf(&b, `<startDate>%s</startDate>`, c.Start.UTC().Format(time.RFC3339))
	}
	if !c.End.IsZero() {
		fmt.Fprintf(&b, `<endDate>%s</endDate><endDateType>limited</endDateType>`, c.End.UTC().Format(time.RFC3339))
	} else {
		b.WriteString(`<endDateType>unlimited</endDateType>`)
	}
	if len(c.Tags) > 0 {
		b.WriteString(tagsXML(c.Tags))
	}
	return b.String()
}

// takeReservation applies a RunInstances' CapacityReservationSpecification
// as EC2 documents it: a launch targeting a reservation by id runs in it,
// or fails with ReservationCapacityExceeded when it is full and
// InvalidCapacityReservationId.NotFound when it does not exist; a Capacity
// Block must be launched on the capacity-block market. A launch with
// preference "none" never uses an open reservation; one without any
// specification uses a matching open reservation that has room (the
// default preference "open"), which the fake counts.
func (f *fakeEC2) takeReservation(r *fakeReq, zoneID string) *http.Response {
	typ := r.Form.Get("InstanceType")
	if id := r.Form.Get("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId"); id != "" {
		for _, c := range f.crs {
			if c.ID != id || c.Region != r.Region {
				continue
			}
			switch {
			case c.State != "active":
				return ec2Error(400, "InvalidCapacityReservationState.PendingActivation", "Your Capacity Block is not active yet.")
			case c.ZoneID != zoneID || c.Type != typ:
				return ec2Error(400, "InvalidParameterValue", "The instance does not match the Capacity Reservation "+id)
			case c.ResType == "capacity-block" && r.Form.Get("InstanceMarketOptions.MarketType") != "capacity-block":
				return ec2Error(400, "InvalidParameterCombination", "Capacity Blocks require the capacity-block market type")
			case c.Free <= 0:
				return ec2Error(400, "ReservationCapacityExceeded",
					"The targeted Capacity Reservation does not have enough available instance capacity to fulfill your request.")
			}
			c.Free--
			return nil
		}
		return ec2Error(400, "InvalidCapacityReservationId.NotFound", "The capacity reservation ID '"+id+"' does not exist")
	}
	if r.Form.Get("CapacityReservationSpecification.CapacityReservationPreference") == "none" || r.Form.Get("InstanceMarketOptions.MarketType") == "spot" {
		return nil
	}
	for _, c := range f.crs {
		if c.Region == r.Region && c.ZoneID == zoneID && c.Type == typ && c.State == "active" && c.Criteria == "open" && c.Free > 0 {
			c.Free--
			return nil
		}
	}
	return nil
}

// availabilityZones answers DescribeAvailabilityZones with the region's
// zones az1…az6 (zoneName, zoneId).
func (f *fakeEC2) availabilityZones(r *fakeReq) *http.Response {
	var b strings.Builder
	b.WriteString(`<availabilityZoneInfo>`)
	for prefix, region := range regionOfZone {
		if region != r.Region {
			continue
		}
		for i := 1; i <= 6; i++ {
			id := prefix + "-az" + strconv.Itoa(i)
			fmt.Fprintf(&b, `<item><zoneName>%s</zoneName><zoneId>%s</zoneId><zoneState>available</zoneState><regionName>%s</regionName></item>`,
				zoneName(id), id, region)
		}
	}
	b.WriteString(`</availabilityZoneInfo>`)
	return answer("DescribeAvailabilityZones", b.String())
}

// serviceQuota answers Service Quotas' GetServiceQuota (JSON 1.1,
// X-Amz-Target ServiceQuotasV20190624.GetServiceQuota) with the response
// syntax of the Service Quotas API Reference: {"Quota": {ServiceCode,
// QuotaCode, QuotaName, Value, Unit, Adjustable, GlobalQuota, QuotaArn}},
// and NoSuchResourceException for a quota it does not hold.
func (f *fakeEC2) serviceQuota(r *fakeReq) *http.Response {
	service, code := jsonField(r.Body, "ServiceCode"), jsonField(r.Body, "QuotaCode")
	v, ok := f.quotas[r.Region+"|"+code]
	if service != "ec2" || !ok {
		return ssmError(400, "NoSuchResourceException")
	}
	name := map[string]string{"L-417A185B": "Running On-Demand P instances", "L-DB2E81BA": "Running On-Demand G and VT instances",
		"L-7212CCBC": "All P Spot Instance Requests", "L-3819A6DF": "All G and VT Spot Instance Requests"}[code]
	resp := httpmock.NewStringResponse(200, fmt.Sprintf(`{"Quota":{"ServiceCode":"ec2","ServiceName":"Amazon Elastic Compute Cloud (Amazon EC2)",`+
		`"QuotaArn":"arn:aws:servicequotas:%s:123456789012:ec2/%s","QuotaCode":%q,"QuotaName":%q,"Value":%v,"Unit":"None",`+
		`"Adjustable":true,"GlobalQuota":false}}`, r.Region, code, code, name, v))
	resp.Header.Set("Content-Type", "application/x-amz-json-1.1")
	return resp
}
